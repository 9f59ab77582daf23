"""Progress within a round: bars on a terminal, plain lines elsewhere."""

import io

from spade_ray.tracking import Progress


def test_without_a_terminal_each_step_is_one_plain_line():
    out = io.StringIO()
    progress = Progress(3, {"generated": 8}, stream=out)
    progress.advance(generated=2)
    progress.advance(solved=1, executed=4)
    progress.close()
    assert out.getvalue().splitlines() == [
        "round 3: 2/8 generator outputs, 0 tasks solved, 0 candidates executed",
        "round 3: 2/8 generator outputs, 1 tasks solved, 4 candidates executed"]


def test_on_a_terminal_the_bars_count_and_are_cleared_at_the_end():
    out = io.StringIO()
    progress = Progress(0, {"generated": 8}, stream=out, tty=True)
    progress.advance(generated=4, executed=3)
    shown = out.getvalue()
    assert "round 0 generator outputs" in shown and "4/8" in shown
    progress.close()
    assert progress.bars == {} and progress.counts == {"generated": 4, "solved": 0,
                                                       "executed": 3}
