"""The same program gets the same verdict on every backend (red-team s24 H6, p8)."""

import pytest

from spade_ray.records import ExecStatus
from tests.conftest import TEST_LIMITS

HOLD = "x = bytearray({mb} << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\n"


@pytest.mark.parametrize("over_mb", [2, 8])
def test_memory_just_over_the_limit_is_the_memory_limit(sandbox, over_mb):
    """The Docker container's limit has room for the jail's server: a program holding 135 MB
    under 128 MB was ok there and memory_limit on the local backend."""
    result = sandbox.run(HOLD.format(mb=TEST_LIMITS.memory_mb + over_mb))
    assert result.status is ExecStatus.MEMORY_LIMIT, result


def test_memory_well_under_the_limit_is_never_flagged(sandbox):
    """The server's share of the peak (the output it buffers, here the whole 64 KB cap) must not
    push an honest program over."""
    code = HOLD.format(mb=TEST_LIMITS.memory_mb - 24) + "print('é' * 31_000)\n"
    for _ in range(3):
        result = sandbox.run(code)
        assert result.status is ExecStatus.OK, result
