"""The run report: its HTML (pure Python) and how it renders in a real headless Chromium.

The browser tests drive Debian's chromium over the DevTools protocol on a pipe
(--remote-debugging-pipe: NUL-terminated JSON on the browser's fds 3 and 4), so they need no
websocket client and no port. They skip when chromium is absent, unless SPADE_REQUIRE_CHROMIUM=1
(CI sets it; `make test` installs chromium with launch/install_chromium.sh): then they fail.
"""

import base64
import dataclasses
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spade_ray.records import RoundState, to_dict
from spade_ray.tracking import TraceStore, Versions
from spade_ray.tracking.plots import DEFAULT_DIFFICULTY_BAND, round_charts
from spade_ray.tracking.report import SampleTask, render_report, sample_tasks, write_report
from tests.tracking import factories as f

V = Versions(generator=1, solver=1)
SECTIONS = ["curves", "gate", "cost", "collapse", "mix", "samples"]
# Fields a RoundMetrics line may lack: written by versions before the co-evolution control.
OPTIONAL = ("validation_tiers", "difficulty_band", "task_diversity", "topic_tasks",
            "collapse_alarm", "collapse_evidence", "generator_rollback", "generator_difficulty",
            "control_level", "hard_tasks_injected")
SCRIPT_TASK = "<script>alert('owned')</script> & sum"


def _row(round: int, **extra) -> dict:
    row = {k: v for k, v in to_dict(f.metrics(round)).items() if k not in OPTIONAL}
    return {**row, "update": "accepted", "learner_loss": 0.7 - 0.1 * round,
            "family_tasks": [["codegen", 2], ["repair", 1]], **extra}


def _full_rows() -> list[dict]:
    return [_row(r, validation_tiers=[["easy", 0.5 + 0.1 * r], ["hard", 0.1]],
                 difficulty_band=[0.25, 0.75], task_diversity=0.6, generator_rollback=None,
                 topic_tasks=[["lists", 1], ["strings", 2]],
                 collapse_alarm=["pass_rate_high", "diversity_low"] if r == 2 else [])
            for r in range(3)] + [_row(3, update="rejected", rejected_by=["pass_at_1"],
                                       generator_rollback=1, collapse_alarm=["diversity_low"])]


def _write_metrics(run_dir, rows) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _write_trace(run_dir) -> None:
    task = dataclasses.replace(f.task(0), description=SCRIPT_TASK)
    seed = dataclasses.replace(f.task(1), source="seed")
    with TraceStore(run_dir / "trace.sqlite", "run") as store:
        store.record_task(0, task, True, "", V)
        store.record_task(0, seed, True, "", V)
        candidates = [dataclasses.replace(f.candidate("t0", i), code=f"def f(x):  # c{i}\n")
                      for i in range(3)]
        store.record_candidates(0, candidates, V)
        store.record_scores(0, [dataclasses.replace(f.score("t0/0", passed=False), value=0.5),
                                f.score("t0/1", passed=True), f.score("t0/2", passed=False)], V)
        store.record_candidates(0, [f.candidate("t1", 0)], V)
        store.record_scores(0, [f.score("t1/0")], V)
        store.record_task(1, task, True, "", V)  # replayed from the archive: not a new sample


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    _write_metrics(path, _full_rows())
    _write_trace(path)
    return path


@pytest.fixture(scope="module")
def report(run_dir):
    """The report of the full run (drawing its charts takes a second or two: drawn once)."""
    return write_report(run_dir)


def _section(page: str, anchor: str) -> str:
    start = page.index(f'<section id="{anchor}">')
    return page[start:page.index("</section>", start)]


def test_report_is_written_into_the_run_dir_with_every_section(run_dir, report):
    page = report.read_text()
    assert report == run_dir / "report.html"
    assert [anchor for anchor in SECTIONS if f'<section id="{anchor}">' in page] == SECTIONS


def test_every_chart_with_data_is_an_inline_svg_image(report):
    page = report.read_text()
    stems = [c.stem for c in round_charts(_full_rows()) if not c.empty]
    assert len(stems) == 13  # every chart has data in the full rows
    assert page.count('<img class="chart"') == len(stems)
    assert all(f'id="chart-{stem}"><img class="chart"' in page for stem in stems)
    assert page.count('src="data:image/svg+xml;base64,') == len(stems)


def test_page_loads_nothing_from_the_network():
    page = render_report(_full_rows(), [])
    assert "http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'" in page
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page


def test_task_text_is_html_escaped(report):
    page = report.read_text()
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt; &amp; sum" in page


# Trojan Source: the page would show `# admin` inside the string and a comment `harmless`
TROJAN = ("def f(x):\n\ts = 'user\u202e \u2066# admin\u2069 \u2066'  # \u202eharmless\u200b\n"
          "    return x\ufeff\x1b[8m\n")


def _sample(**changes) -> SampleTask:
    return SampleTask(**{**dict(round=0, task_id="t0", family="codegen", topic="arith",
                                description="add", reference="def f(x):\n    return x\n",
                                candidates=0, pass_rate=None, best=None, worst=None), **changes})


def test_bidi_and_invisible_controls_in_code_reach_the_page_only_as_markers():
    page = render_report([], [_sample(reference=TROJAN)])
    assert [ch for ch in page if not ch.isprintable() and ch not in "\n\t"] == []
    assert ("<pre><code>def f(x):\n\ts = &#x27;user<span class=\"ctl\">⟨U+202E⟩</span> "
            '<span class="ctl">⟨U+2066⟩</span># admin') in page


def test_a_control_in_the_run_id_is_a_bare_marker_in_the_title():
    page = render_report([], [], title="run\u202e1")
    assert "<title>spade-ray report: run⟨U+202E⟩1</title>" in page


def test_a_round_that_is_not_a_number_is_escaped():
    # SQLite keeps a text in an INTEGER column: a crafted trace.sqlite sets it (pass 15, F10)
    page = render_report([], [_sample(round='<a href="https://example.invalid/">click</a>')])
    assert "<a href" not in page and "round &lt;a href=&quot;https://example.invalid/" in page


def test_sample_task_shows_reference_and_best_and_worst_candidate(report):
    samples = _section(report.read_text(), "samples")
    assert samples.count("<article") == 1  # the seed and the archive replay are not samples
    assert "return x + 0" in samples  # the reference
    assert "best candidate: score 1, ok, 1/1 tests" in samples and "# c1" in samples
    assert "worst candidate: score 0, error, 0/1 tests" in samples and "# c2" in samples
    assert "# c0" not in samples  # neither best nor worst


def test_sample_tasks_are_spread_over_the_run_and_prefer_scored_ones(tmp_path):
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        for n in range(10):
            store.record_task(n, f.task(n), True, "", V)
            if n != 9:
                store.record_candidates(n, [f.candidate(f"t{n}")], V)
                store.record_scores(n, [f.score(f"t{n}/0")], V)
    picked = [s.task_id for s in sample_tasks(tmp_path / "trace.sqlite", "run", limit=3)]
    assert picked == ["t0", "t4", "t8"]


def test_gate_decisions_and_collapse_events_are_tabled(report):
    page = report.read_text()
    gate, collapse = _section(page, "gate"), _section(page, "collapse")
    assert gate.count("<td>accepted</td>") == 3 and "<td>pass_at_1</td>" in gate
    assert "<td>2</td><td>pass_rate_high; diversity_low</td><td>–</td>" in collapse
    assert "<td>3</td><td>diversity_low</td><td>1</td>" in collapse


def test_header_names_the_run_rounds_and_versions(report):
    header = report.read_text().split("</header>")[0]
    assert "<h1>Run run</h1>" in header and "4 (0–3)" in header
    assert "<th>generator version</th><td>0 → 3</td>" in header


def test_metrics_without_the_optional_fields_say_none_recorded(tmp_path):
    _write_metrics(tmp_path, [_row(0), _row(1)])
    page = write_report(tmp_path).read_text()
    assert "none recorded" in _section(page, "collapse")
    assert "Admitted tasks per topic: none recorded" in _section(page, "mix")
    band = next(c for c in round_charts([_row(0)]) if c.stem == "new_task_pass_rate").band
    assert band == DEFAULT_DIFFICULTY_BAND


def test_band_and_tiers_are_drawn_when_the_metrics_have_them():
    charts = {c.stem: c for c in round_charts(_full_rows())}
    assert charts["new_task_pass_rate"].band == (0.25, 0.75)
    assert [s.label for s in charts["validation_pass_at_1"].series] == ["pass@1", "easy", "hard"]
    assert [s.label for s in charts["pairs"].series] == ["solver", "generator"]


def test_unknown_and_malformed_fields_never_break_the_page(tmp_path):
    rows = [{"run_id": "old", "round": 0, "wall_s": 3.0},  # a much older file
            {"run_id": "old", "round": 1, "validation_pass_at_1": "n/a", "family_tasks": "x",
             "difficulty_band": [0.9], "collapse_alarm": 5, "stage_s": [["gen", None], [1]],
             "a_field_from_the_future": {"nested": [1, 2]}},
            {"round": "two"}]  # no integer round: skipped
    _write_metrics(tmp_path, rows)
    page = write_report(tmp_path).read_text()
    assert [anchor for anchor in SECTIONS if f'<section id="{anchor}">' in page] == SECTIONS
    assert "<td>1</td><td>5</td>" in _section(page, "collapse")


def test_empty_trace_and_no_trace_still_give_a_page(tmp_path):
    _write_metrics(tmp_path / "a", [_row(0)])
    TraceStore(tmp_path / "a" / "trace.sqlite", "run").close()
    _write_metrics(tmp_path / "b", [_row(0)])
    empty = _section(write_report(tmp_path / "a").read_text(), "samples")
    missing = _section(write_report(tmp_path / "b").read_text(), "samples")
    assert "none recorded" in empty
    assert "could not read" in missing and "no trace store" in missing


def test_a_damaged_trace_is_said_outside_the_page_too(tmp_path, caplog):
    _write_metrics(tmp_path, [_row(0)])
    (tmp_path / "trace.sqlite").write_bytes(b"not a database" * 100)
    write_report(tmp_path)
    assert "trace.sqlite" in caplog.text and "the report has no sample tasks" in caplog.text


def test_metrics_of_one_run_beside_the_trace_of_another_are_said(tmp_path, caplog):
    _write_metrics(tmp_path, [_row(0, run_id="other")])
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        store.complete_round(0, f.metrics(0, run_id="run"), RoundState())
    samples = _section(write_report(tmp_path).read_text(), "samples")
    assert "holds run(s) [&#x27;other&#x27;], the trace holds [&#x27;run&#x27;]" in samples
    assert "metrics.jsonl holds run(s) ['other'], the trace holds ['run']" in caplog.text


def test_a_directory_without_metrics_or_trace_is_refused_with_its_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither metrics.jsonl nor trace.sqlite"):
        write_report(tmp_path)


def test_report_goes_where_it_is_asked(tmp_path):
    _write_metrics(tmp_path / "run", [_row(0)])
    out = write_report(tmp_path / "run", tmp_path / "elsewhere.html")
    assert out == tmp_path / "elsewhere.html" and out.is_file()
    assert not (tmp_path / "run" / "report.html").exists()


def test_report_into_a_directory_is_written_as_report_html_there(tmp_path):
    _write_metrics(tmp_path / "run", [_row(0)])
    (tmp_path / "out").mkdir()
    assert write_report(tmp_path / "run", tmp_path / "out") == tmp_path / "out" / "report.html"
    assert (tmp_path / "out" / "report.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "run"]


def test_report_under_a_missing_directory_is_refused_naming_it(tmp_path):
    _write_metrics(tmp_path / "run", [_row(0)])
    with pytest.raises(FileNotFoundError, match=f"no directory {tmp_path / 'gone' / 'deeper'}"):
        write_report(tmp_path / "run", tmp_path / "gone" / "deeper" / "page.html")


def test_a_report_that_cannot_replace_its_target_leaves_no_partial_page(tmp_path):
    _write_metrics(tmp_path / "run", [_row(0)])
    (tmp_path / "run" / "report.html").mkdir()  # os.replace of a file onto a directory fails
    with pytest.raises(OSError, match="cannot write the report to .*report.html: Is a direct"):
        write_report(tmp_path / "run")
    assert not (tmp_path / "run" / "report.html.tmp").exists()


# --- in a real browser -------------------------------------------------------------------------

class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe."""

    def __init__(self, binary: str, profile: str, timeout_s: float = 30.0) -> None:
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()
        # The browser reads commands on fd 3 and writes replies on fd 4; bash moves the pipe ends
        # there, from fds >= 10 so that neither redirection overwrites the other's source.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser, from_browser)]
        for fd in (to_browser, from_browser):
            os.close(fd)
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]
        self.log = Path(profile + ".log")
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(
                ["bash", "-c", f'exec "$@" 3<&{ends[0]} 4>&{ends[1]}', "bash", *args],
                pass_fds=ends, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        for fd in ends:
            os.close(fd)
        self._writer = os.fdopen(self._commands, "wb")
        self._buffer = b""
        self._next_id = 0
        self.timeout_s = timeout_s
        self.events: list[dict] = []

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._writer.write(json.dumps(message).encode() + b"\0")
        self._writer.flush()
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method} failed: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def open(self, url: str, width: int = 1280, height: int = 900) -> str:
        """A new tab showing `url` after its load event; returns its session id."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session)
        self.call("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", session, url=url)
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._receive())
        return session

    def evaluate(self, session: str, expression: str):
        result = self.call("Runtime.evaluate", session, expression=expression,
                           returnByValue=True, awaitPromise=True)
        return result["result"].get("value")

    def screenshot(self, session: str, clip: dict) -> Image.Image:
        data = self.call("Page.captureScreenshot", session, format="png",
                         captureBeyondViewport=True, clip={**clip, "scale": 1})["data"]
        return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(json.dumps(params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (EOFError, OSError, RuntimeError):
            pass
        finally:
            self._writer.close()
            os.close(self._replies)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _receive(self) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError(f"chromium sent nothing for {self.timeout_s} s")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise EOFError(f"chromium closed its pipe (exit code {self._proc.poll()}); "
                               f"its log: {self.log}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)


@pytest.fixture
def browser(tmp_path):
    binary = shutil.which("chromium")
    if binary is None:
        if os.environ.get("SPADE_REQUIRE_CHROMIUM") == "1":
            pytest.fail("SPADE_REQUIRE_CHROMIUM=1 but chromium is not on PATH; run "
                        "launch/install_chromium.sh (as root)")
        pytest.skip("chromium is not installed (launch/install_chromium.sh installs it; "
                    "SPADE_REQUIRE_CHROMIUM=1 turns this skip into a failure)")
    chromium = Chromium(binary, str(tmp_path / "profile"))
    yield chromium
    chromium.close()


_CHARTS_JS = """[...document.querySelectorAll('img.chart')]
    .map(i => [i.closest('figure').id, i.complete, i.naturalWidth, i.naturalHeight])"""
_SECTIONS_JS = "[...document.querySelectorAll('section')].map(s => s.id)"


def test_report_loads_in_chromium_with_every_chart_decoded_and_no_errors(browser, report):
    session = browser.open(report.as_uri())
    charts = browser.evaluate(session, _CHARTS_JS)
    stems = [c.stem for c in round_charts(_full_rows()) if not c.empty]
    assert [figure_id for figure_id, *_ in charts] == [f"chart-{s}" for s in stems]
    assert all(complete and width > 0 and height > 0 for _, complete, width, height in charts)
    assert browser.evaluate(session, _SECTIONS_JS) == SECTIONS
    assert browser.evaluate(session, "document.querySelectorAll('script').length") == 0
    assert browser.errors() == []


def test_screenshot_of_the_pass_rate_chart_shows_its_line_and_band(browser, report):
    session = browser.open(report.as_uri())
    rect = browser.evaluate(session, """(() => {
        const img = document.querySelector('#chart-new_task_pass_rate img');
        const r = img.getBoundingClientRect();  // the border box: step inside the border
        return {x: r.x + img.clientLeft + window.scrollX, y: r.y + img.clientTop + window.scrollY,
                width: img.clientWidth, height: img.clientHeight}; })()""")
    pixels = np.asarray(browser.screenshot(session, rect)).astype(int)
    assert pixels.shape[:2] == (350, 600)
    blue = np.abs(pixels - [31, 119, 180]).sum(axis=2) < 40  # matplotlib's first colour, C0
    band = np.abs(pixels - [220, 236, 220]).sum(axis=2) < 30  # tab:green at alpha 0.15 on white
    assert blue.sum() > 300, "the pass-rate line is not on the screen"
    assert band.mean() > 0.1, "the target band is not on the screen"


def test_the_error_check_sees_what_the_page_policy_blocks(browser, tmp_path):
    page = render_report([_row(0)], []).replace(
        "</body>", '<img src="http://127.0.0.1:9/x.png"></body>')
    (tmp_path / "blocked.html").write_text(page)
    browser.open((tmp_path / "blocked.html").as_uri())
    assert browser.errors(), "a fetch the Content-Security-Policy refuses must show as an error"
