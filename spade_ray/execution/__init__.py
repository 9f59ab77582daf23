"""Host side of the sandbox: backends (local bwrap, Docker), the Ray pool, checking code.

    from spade_ray.execution import Sandbox
    with Sandbox(backend="local") as sb:
        result = sb.run("print(1 + 1)")

`Executor` is the interface both `Sandbox` and `pool.SandboxPool` (imports Ray) implement;
`Placement` says which one a run uses.
"""

from spade_ray.execution.executor import Executor, Placement
from spade_ray.execution.protocol import BackendUnavailable
from spade_ray.execution.sandbox import BACKENDS, MAX_CODE_BYTES, Sandbox, SandboxInputError

__all__ = ["BACKENDS", "MAX_CODE_BYTES", "BackendUnavailable", "Executor", "Placement", "Sandbox",
           "SandboxInputError"]
