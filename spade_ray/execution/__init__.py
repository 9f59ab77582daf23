"""Host side of the sandbox: backends (local bwrap, Docker), the Ray pool, checking code.

    from spade_ray.execution import Sandbox
    with Sandbox(backend="local") as sb:
        result = sb.run("print(1 + 1)")
"""

from spade_ray.execution.protocol import BackendUnavailable
from spade_ray.execution.sandbox import BACKENDS, Sandbox, SandboxInputError

__all__ = ["BACKENDS", "BackendUnavailable", "Sandbox", "SandboxInputError"]
