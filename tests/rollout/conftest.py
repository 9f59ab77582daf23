"""vLLM's engines bind ZMQ sockets named by UUIDs in VLLM_RPC_BASE_PATH (the system temp dir by
default), and an engine that is stopped by a signal leaves them there: a run of the vLLM tests
left 28 in /tmp. They go to the session's temp dir instead, which pytest prunes."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def vllm_ipc_dir(tmp_path_factory):
    old = os.environ.get("VLLM_RPC_BASE_PATH")
    os.environ["VLLM_RPC_BASE_PATH"] = str(tmp_path_factory.mktemp("vllm-ipc"))
    yield
    if old is None:
        del os.environ["VLLM_RPC_BASE_PATH"]
    else:
        os.environ["VLLM_RPC_BASE_PATH"] = old
