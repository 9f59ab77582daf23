"""The trusted side of a check: runs a task's tests in a process of its own, never the candidate's.

Forked by the harness (PID 1) before the candidate, it holds the tests; the candidate never does
(the harness zeroes its copy before forking the candidate). Test code calls the candidate only
through proxies: a call sends the arguments as canonical data (canonical.py) down a pipe to the
candidate process, which calls its function there and sends back the result as canonical data.
So what the tests compare is plain, type-exact data decoded here: an object with its own
`__eq__`, a patched builtin, an exit, a trace hook or a forged report in the candidate's process
changes nothing on this side. Non-dumpable (inherited from the harness): a process of the same
uid cannot ptrace it or read its memory or fds through /proc.

Test shapes: `examples` (an entry point, argument tuples, expected results, compared with
`canonical.same`), `asserts` (statements; free names that neither Python's builtins nor the
trusted `preamble` define become proxies of the candidate's functions), and `check` (HumanEval's
`def check(candidate)`, called with a proxy of the entry point; the `preamble` (HumanEval's
prompt) is run here first, so helpers the tests use, like `poly` or `encode_cyclic`, are the
task's own, not the candidate's).

No call depends on whether an earlier answer was right: the asserts of `check` and `asserts`
record whether they held and the test goes on (recording.py), the examples' answers are all
collected first (`_replies`), and the outcomes are decided after the last call. An outcome is
the one the test would have had had it stopped at its first failed assert, with that assert's
message.

What crosses is data: arguments are copies (a test cannot see the candidate mutate them), and only
functions can be called (no objects, no module attributes). An exception the candidate raises
comes back as the builtin exception of that name (or CandidateException), so tests that expect a
`ValueError` work, except StopIteration and StopAsyncIteration, which would end the test's own
iteration (a CandidateException instead); a candidate that dies, answers out of turn or sends
malformed data fails every later call with CandidateGone, a BaseException that test code's
`except Exception` cannot swallow, and a test in which a call raised it errors whatever its code
did with it (a `return` in a `finally`, a thread's asserts: `Link.call`). Everything the tester
notices that honest code would not do is reported as `suspicion`.

Report (fd 3, one JSON object, then exit): {"nonce", "outcomes": [...], "suspicion": [str]}.
"""

import builtins
import json
import os
import select
import signal
import time
import types

import canonical
import framing
import recording

REPORT_FD, REPLY_FD, CALL_FD, TESTS_FD = 3, 4, 5, 6
TESTS_CAP_BYTES = 64 * 1024 * 1024  # harness.py's cap on the tests frame it forwards
MESSAGE_CHARS = 300
# Suspicious only if the candidate then exited with status 0 (the host knows): a program that
# crashes mid-test is merely wrong, one that exits "successfully" mid-test is dodging the tests.
ENDED = "the candidate process ended during the tests"
# An example's answer may be ANSWER_FLOOR_BYTES long as canonical text, or this many times as
# long as the longest expected result's text of the task where that is longer: an equal
# value's text is as long but for its floats' spelling, each at most 2.8 times longer (0x0p+0
# against -0x1.fffffffffffffp+1023), within a tolerance. One bound for all the examples, and
# the same for every task whose expected results are all under a quarter of the floor (every
# generated task's is): a bound set by each example's own expected result told the candidate,
# one bit per example, whether that result was longer than a size it picked (red-team s32).
# All the answers kept until they are compared take ANSWERS_BUDGET_BYTES at most.
ANSWER_SIZE_RATIO = 4
ANSWER_FLOOR_BYTES = 1024 * 1024
ANSWERS_BUDGET_BYTES = 32 * 1024 * 1024
SIGNALLED = "the grader was sent SIGINT"  # by the candidate: nothing else in the jail does


class CandidateGone(BaseException):
    """The candidate process can no longer answer (it ended, or broke the call protocol)."""


class CandidateException(Exception):
    """The candidate raised an exception that is not one of Python's builtin ones."""


class AnswerTooLarge(AssertionError):
    """An example's answer far longer than any expected result of its task: a wrong one, and
    one we do not keep (`_replies`)."""


class NotPlainResult(BaseException):
    """The candidate returned something that is not plain data: a wrong answer."""


class Link:
    """The call pipe pair to the candidate process, and what it did that honest code would not."""

    def __init__(self):
        self.seq = 0
        self.gone = ""
        self.lost_at = 0  # the number of the call whose reply broke the link, once it did
        self.suspicion = []
        self.last_gone = None  # the last CandidateGone a call of the test code raised

    def call(self, name, args, kwargs):
        """The candidate's answer to one call of the test code, as data. A CandidateGone is
        kept before the test code gets it: test code can drop it (a `return` or `continue`
        in a `finally`, asserts run in a thread), and a candidate that exited in the middle of
        such a check passed it (red-team s37), so `_verdict` reads it from here."""
        try:
            return self.read(*self.ask(name, args, kwargs))
        except CandidateGone as e:
            self.last_gone = e
            raise

    def ask(self, name, args, kwargs, most_bytes=None):
        """Make one call: (its number, the reply's bytes, undecoded); `most_bytes`: a reply
        longer than that is a wrong answer (AnswerTooLarge), never kept."""
        if self.gone:
            raise CandidateGone(self.gone)
        try:
            request = canonical.encode((self.seq, name, tuple(args), dict(kwargs)))
        except canonical.NotPlainData as e:
            raise TypeError(f"the test passed an argument that is not plain data: {e}") from None
        try:
            framing.send_frame(CALL_FD, request.encode("ascii"))
            reply = framing.recv_frame(REPLY_FD)
        except OSError:
            reply = None
        if reply is None:
            self._lose(ENDED, self.seq)
        if select.select([REPLY_FD], [], [], 0)[0]:  # more than the one answer we asked for
            self.note("sent answers before it was asked")
        self.seq += 1
        if most_bytes is not None and len(reply) > most_bytes:
            raise AnswerTooLarge(f"an answer of {len(reply)} bytes, over the {most_bytes} "
                                 "an answer may have")
        return self.seq - 1, reply

    def read(self, seq, reply):
        """The answer in the reply to call number `seq`, as data (or the exception it says the
        candidate raised). A reply that breaks the protocol ends the link: every later call,
        and the reply to every later one, fails with CandidateGone."""
        if self.gone and seq >= self.lost_at:
            raise CandidateGone(self.gone)
        try:
            answer = canonical.decode(reply)
        except canonical.NotPlainData as e:
            self._lose(f"malformed reply ({e})", seq)
        if (type(answer) is not tuple or len(answer) < 2 or type(answer[0]) is not int
                or answer[0] != seq):
            self._lose("a reply out of turn", seq)
        kind, rest = answer[1], answer[2:]
        if kind == "ok" and len(rest) == 1:
            return rest[0]
        if kind == "raise" and len(rest) == 2 and all(type(x) is str for x in rest):
            raise _exception(self, *rest)
        if (kind == "unplain" and len(rest) == 3 and type(rest[0]) is str
                and type(rest[1]) is str and type(rest[2]) is bool):
            type_name, why, odd = rest
            if odd:  # the candidate's side saw equality or hashing overridden, or a subclass
                self.note(f"returned a {type_name[:80]} ({why[:80]})")
            raise NotPlainResult(f"returned a {type_name[:80]}: {why[:120]}")
        self._lose("a reply of unknown shape", seq)

    def _lose(self, why, seq):
        if not self.gone or seq < self.lost_at:
            self.gone, self.lost_at = why, seq
        self.note(why)
        raise CandidateGone(why)

    def note(self, why):
        if why not in self.suspicion:
            self.suspicion.append(why)


def _exception(link, type_name, message):
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, BaseException) and not issubclass(cls, Exception):
        link.note(f"raised {type_name} in a test call")  # SystemExit, KeyboardInterrupt, ...
        return CandidateGone(f"{type_name}: {message}")
    if isinstance(cls, type) and issubclass(cls, (StopIteration, StopAsyncIteration)):
        # Raised from a call inside map(), filter(), zip() or next(it, default), it would end
        # the test's own iteration: all(map(lambda x: f(x) == y, xs)) passes on the empty rest
        return CandidateException(f"{type_name}: {message}")
    if isinstance(cls, type) and issubclass(cls, Exception):
        # the class itself, or the nearest class above it that takes a message alone: a
        # UnicodeDecodeError (five arguments) is a UnicodeError, which `except ValueError`
        # still catches, where a CandidateException escaped it (red-team s32)
        for kind in cls.__mro__[:cls.__mro__.index(Exception)]:
            try:
                return kind(message)
            except Exception:  # noqa: BLE001 - its constructor wants more than a message
                continue
    return CandidateException(f"{type_name}: {message}")


class Proxy:
    """Stands for one of the candidate's functions in the test code."""

    __slots__ = ("_link", "_name")

    def __init__(self, link, name):
        self._link = link
        self._name = name

    def __call__(self, *args, **kwargs):
        return self._link.call(self._name, args, kwargs)

    def __repr__(self):
        return f"<candidate function {self._name}>"


def grade(tests, link):
    """Run every test; returns the outcomes (one per assert, one for check, one per example).
    Every call the tests make is made before any outcome is decided: an assert of the check or
    of an assert source records whether it held and the test goes on (recording.py), and the
    examples' replies are collected first (`_replies`)."""
    namespace = {"__name__": "__grader__", "__builtins__": builtins}
    preamble_error = _run_preamble(tests.get("preamble"), namespace)
    entry = tests.get("entry_point")
    if entry:
        namespace[entry] = Proxy(link, entry)
    asserts = [recording.rewrite(source) for source in tests.get("asserts") or []]
    check = recording.rewrite(tests["check"]) if tests.get("check") else None
    recorder = namespace[recording.RECORD] = recording.Recorder((Exception, NotPlainResult))
    for name in _free_names(asserts + ([check] if check else [])):
        namespace.setdefault(name, Proxy(link, name))
    runs = []
    for i, code in enumerate(asserts):
        runs.append((f"assert[{i}]", _run(recorder, link, preamble_error,
                                          lambda c=code: exec(c, namespace))))
    if check:
        runs.append(("check", _run(recorder, link, preamble_error,
                                   lambda: _run_check(check, namespace, entry))))
    tolerance = float(tests.get("tolerance") or 0.0)
    examples = tests.get("examples") or []
    replies = [] if preamble_error else _replies(link, entry, examples)
    outcomes = [_verdict(name, preamble_error, *run) for name, run in runs]
    for i, (_, expected_text) in enumerate(examples):
        got = replies[i] if replies else (None, None, None, 0.0)
        outcomes.append(_one(f"example[{i}]", preamble_error,
                             lambda g=got, e=expected_text: _compare(link, g, e, tolerance),
                             got[3]))
    return outcomes


def _run_preamble(preamble, namespace):
    if not preamble:
        return ""
    try:
        exec(compile(preamble, "<preamble>", "exec"), namespace)
        return ""
    except BaseException as e:  # noqa: BLE001 - the task's own code failed: every test errors
        return f"the task's preamble failed: {describe(e)}"


def _free_names(codes):
    """The names of the compiled test code (nested functions included) that Python's builtins
    do not define. A superset of the globals it reads (attribute, imported and assigned names are
    among them): a proxy under a name the code never reads is never called, and the one name we
    read ourselves, `check`, must not be one. Read from the code objects rather than from an AST
    walk, which cost a second parse and 0.15 ms per HumanEval check (measured)."""
    names, stack = set(), list(codes)
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if type(c) is types.CodeType)
    return sorted(n for n in names if not hasattr(builtins, n))


def _run_check(code, namespace, entry):
    exec(code, namespace)
    check = namespace["check"]
    if type(check) is Proxy:  # the check code never defined it: never call the candidate's
        raise NameError("the check code defines no function check")
    check(namespace[entry])


def _run(recorder, link, preamble_error, body):
    """Run one test body (an assert source, or the check) with a fresh record: (records, the
    exception that stopped it or None, wall seconds, a CandidateGone one of its calls raised,
    whatever the body did with it, or None)."""
    recorder.records = records = []
    if preamble_error:
        return records, None, 0.0, None
    start = time.perf_counter()
    link.last_gone = None
    try:
        body()
        error = None
    except BaseException as e:  # noqa: BLE001 - judged with the records, after the last call
        error = e
    return records, error, time.perf_counter() - start, link.last_gone


def _verdict(name, preamble_error, records, error, wall_s, gone):
    """The outcome the test would have had had its first failed assert raised: the first record
    that did not hold decides, else a call that found the candidate gone, else the exception
    that stopped the body, else passed."""
    start = time.perf_counter() - wall_s
    if preamble_error:
        outcome, message = "error", preamble_error
    else:
        outcome, message = "passed", ""
        for held, test_error, text, text_error in records:
            if held:
                continue
            if test_error is None and text_error is None:
                error = AssertionError() if text is recording.NO_MESSAGE else AssertionError(text)
            else:
                error = test_error if test_error is not None else text_error
            break
        else:
            error = gone if gone is not None else error
        if error is not None:
            outcome = "failed" if isinstance(error, AssertionError) else "error"
            message = describe(error)
    return {"name": name, "outcome": outcome, "message": message[:MESSAGE_CHARS],
            "wall_s": time.perf_counter() - start}


def _replies(link, entry, examples):
    """The candidate's reply to every example, (call number, its bytes, the exception that
    made it none, wall seconds), before any is decoded or compared. The candidate can read this
    process's CPU time and memory (/proc/PID/schedstat and statm are world-readable), so
    nothing done here may depend on an expected result: an expected result decoded before its
    call told the size of the answer it was about to give (1.1 ms for "a", 16-18 ms for 4
    MB), a comparison between two calls whether the last answer was right (a failure's path
    cost 3-8 us more: 66-73% right per example, red-team s24), and an answer decoded only when
    under its own expected result's bound whether that result was longer than the bound the
    candidate aimed at (12 of 12 right, red-team s32). The bound on each (ANSWER_FLOOR_BYTES)
    and on all of them is one for the task: on the local backend this process is outside the
    run's memory cgroup, and a candidate answering 15 MB to each of 12 examples grew it to
    182 MB under a 128 MB limit (red-team pass 14, R2)."""
    longest = max((len(expected) for _, expected in examples), default=0)
    most = max(ANSWER_FLOOR_BYTES, ANSWER_SIZE_RATIO * longest)
    budget = ANSWERS_BUDGET_BYTES
    out = []
    for args_text, _ in examples:
        start = time.perf_counter()
        try:
            seq, reply = link.ask(entry, canonical.decode(args_text), {}, min(most, budget))
            budget -= len(reply)
            out.append((seq, reply, None, time.perf_counter() - start))
        except BaseException as e:  # noqa: BLE001 - raised again in its turn (_compare)
            # without its frames, which hold the reply (a too large one included)
            out.append((None, None, e.with_traceback(None), time.perf_counter() - start))
    return out


def _compare(link, reply, expected_text, tolerance):
    seq, data, error, _ = reply
    if error is not None:
        raise error
    if not canonical.same(link.read(seq, data), canonical.decode(expected_text), tolerance):
        raise AssertionError("the result differs from the expected one")


def _one(name, preamble_error, body, called_s=0.0):
    start = time.perf_counter() - called_s
    if preamble_error:
        outcome, message = "error", preamble_error
    else:
        try:
            body()
            outcome, message = "passed", ""
        except AssertionError as e:
            outcome, message = "failed", describe(e)
        except BaseException as e:  # noqa: BLE001 - an erroring test is a failed test
            outcome, message = "error", describe(e)
    return {"name": name, "outcome": outcome, "message": message[:MESSAGE_CHARS],
            "wall_s": time.perf_counter() - start}


def describe(exc):
    text = message_of(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def message_of(exc):
    """str(exc), or "" where even that fails (a candidate's exception may break __str__)."""
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001
        return ""


def main(secret):
    """Entry point in the forked tester: `secret` is the tests' JSON (None if the server sent
    none: then no report). Never returns."""
    code = 0
    try:
        tests = json.loads(secret)
        link = Link()
        signal.signal(signal.SIGINT, lambda *_: link.note(SIGNALLED))  # child.grader_main
        outcomes = grade(tests, link)
        report = {"nonce": tests["nonce"], "outcomes": outcomes, "suspicion": link.suspicion}
        framing.write_all(REPORT_FD, json.dumps(report).encode("utf-8"))
    except BaseException:  # noqa: BLE001 - no report: the check fails, nothing else
        code = 1
    # Our pipes close now, not after the kernel has torn down our memory (exit closes files
    # last; 0.8 ms measured in the jail): the candidate sees the end of the calls and ends
    # while we do.
    os.closerange(0, 256)  # RLIMIT_NOFILE (child.set_limits)
    os._exit(code)
