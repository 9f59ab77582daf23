"""Model text on the operator's terminal (red-team pass 15, F2): `query.printable` and the views
that print through it (`spade-ray diagnose`, `spade-ray trace`), on a real trace holding control
sequences in every text the model writes."""

import dataclasses

import pytest

from spade_ray import cli
from spade_ray.records import ExecStatus, RoundState
from spade_ray.tracking import TraceStore, Versions
from spade_ray.tracking.diagnose_findings import one_line
from spade_ray.tracking.query import format_table, printable
from tests.tracking import factories as f

V = Versions(generator=0, solver=0)
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
ZERO_WIDTH = "\u200b\u200c\u200d\u200e\u200f\ufeff"
# C0 (NUL, BEL, CR, ESC, DEL), C1 (NEL, CSI), line / paragraph separators, a tag character
CONTROLS = "\x00\x07\r\x1b\x7f\x85\x9b\u2028\u2029\U000e0041"
HIDDEN = BIDI + ZERO_WIDTH + CONTROLS
# t03's payload (clear the screen, fake a verdict, conceal what follows) and the rest
PAYLOAD = ("\x1b[2J\x1b[Hverdict: OK (15 checks, 0 failed, 0 warnings)\x1b[8m "
           "\x1b]0;title\x07 \x1b[1A\x1b[2K" + HIDDEN)


def unsafe(text: str) -> list[str]:
    """The characters of `text` a terminal acts on or hides: every one below 0x20 but the
    newline, DEL and the C1 block, and the bidi / zero-width / separator controls."""
    return [ch for ch in text if (ch < " " and ch != "\n") or "\x7f" <= ch <= "\x9f"
            or ch in BIDI + ZERO_WIDTH + "\u2028\u2029\U000e0041"]


@pytest.mark.parametrize("ch, shown", [("\x1b", "\\x1b"), ("\r", "\\r"), ("\n", "\\n"),
                                       ("\x07", "\\x07"), ("\x85", "\\x85"),
                                       ("\u202e", "\\u202e"), ("\u2066", "\\u2066"),
                                       ("\u200b", "\\u200b"), ("\ufeff", "\\ufeff"),
                                       ("\u2028", "\\u2028"), ("\U000e0041", "\\U000e0041")])
def test_printable_shows_a_control_character_as_its_escape(ch, shown):
    assert printable(f"a{ch}b") == f"a{shown}b"


def test_printable_leaves_no_hidden_character_of_the_list():
    assert unsafe(printable(HIDDEN)) == []


def test_printable_keeps_plain_text_and_non_ascii_letters_as_they_are():
    text = "def f(x):  return 'Dž ﬁ é 日本 😀 \\x1b' + x  # ü"
    assert printable(text) == text


def test_one_line_cuts_the_escaped_text_to_its_width():
    assert one_line("\x1b" * 30, width=10) == "\\x1b\\x1b\\…"


def test_a_table_cell_cuts_the_escaped_text_to_its_width():
    assert format_table([("\x1b" * 30,)], ["code"], max_width=10).splitlines()[2] == \
        "\\x1b\\x1b\\…"


@pytest.fixture
def run_dir(tmp_path):
    """A run whose generator output, task, candidate code and stderr all carry PAYLOAD; one
    candidate has no execution row, so diagnose prints a FAIL the payload tries to hide."""
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.record_generator_inputs(0, [
            f.generator_input(0, text=PAYLOAD),
            dataclasses.replace(f.generator_input(1, text=PAYLOAD), outcome="unbound:x" + BIDI,
                                task_id=None)], V)
        task = dataclasses.replace(f.task(0), description="add " + PAYLOAD,
                                   topic="arith" + BIDI)
        store.record_task(0, task, True, "", V)
        code = "def f(x):\r    return x  # " + PAYLOAD + "\n"
        ran, missing = (dataclasses.replace(f.candidate("t0", i), code=code) for i in (0, 1))
        check = f.check(stderr="Traceback\nValueError: " + PAYLOAD, passed=False)
        check = dataclasses.replace(check, execution=dataclasses.replace(
            check.execution, status=ExecStatus.ERROR, detail=PAYLOAD))
        store.record_candidates(0, [ran, missing], V)
        store.record_executions(0, [(ran.candidate_id, ran.task_id, check)], V)
        store.record_scores(0, [f.score("t0/0", passed=False)], V)
        store.record_pairs(0, [dataclasses.replace(f.pair(), chosen=code)], V)
        store.complete_round(0, f.metrics(0, run_id="run"), RoundState())
    return tmp_path


def test_diagnose_of_a_run_holding_control_text_prints_none_of_it(run_dir, capsys):
    assert cli.main(["diagnose", str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert unsafe(out) == []
    assert "\\x1b[2J" in out  # the payload is there, shown


@pytest.mark.parametrize("args", [["tasks"], ["candidates", "t0"],
                                  ["sql", "SELECT candidate_id, code FROM candidates"],
                                  ["sql", "SELECT text, outcome FROM generator_inputs"]])
def test_trace_of_a_run_holding_control_text_prints_none_of_it(run_dir, capsys, args):
    assert cli.main(["trace", str(run_dir), *args]) == 0
    out = capsys.readouterr().out
    assert unsafe(out) == []
    assert "\\x1b" in out
