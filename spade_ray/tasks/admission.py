"""Admission by execution: a generated program becomes a task only if running it says it is one.

Every rejection has a short, countable reason (the round's metrics count them):

    static      forbidden:<name>        an import outside ALLOWED_IMPORTS, a call that does I/O
                                        or depends on the process (open, print, id, hash, ...),
                                        a way to another module, or `is` between values
                                        (forbidden:is; tasks/static.py)
                forbidden:module_write  a write to (or del of) an attribute or item of an
                                        imported name (`math.isclose = ...`): it would change
                                        every program sharing the module (tasks/static.py)
                unbound:<name>          a name the reference uses and binds nowhere
                module_code             top-level statements other than imports, defs, constants
    run         reference_<status>      the reference run hit a limit or crashed
                nondeterministic        fresh interpreters (their own hash seeds and address
                                        layouts) disagree, or one disagrees with itself
                                        when the inputs are run again on a moved heap
                                        (on the generator's inputs or the augmented ones;
                                        for repair, the buggy program shown too)
                reference_raises        too few inputs left once those the reference raises on
                                        (or whose result is not plain data, or depends on an
                                        interpreter limit: driver.RAISED) are dropped, or
                                        none of the generator's own
                set_order               an answer changes when every set is read in another
                                        order (reversed, or shuffled): the reference reads a
                                        set in an order no description states (driver.py,
                                        reorder.py), on the generator's inputs or augmented
                reference_slow          the reference needs more than `max_reference_cpu_s`
    trivial     constant_outputs        every input gives the same output
                trivial_passes:<name>   a null solver passes every example (a constant, an echo
                                        of an argument, an object equal to everything); for
                                        predict, the asked call's answer is such a constant
                                        (so no bool: a guess passes half the time), an echo
                                        or a literal of the program;
                trivial_passes:bool     predict: a bool by another name ('True', [c], (n, c)
                                        with n an argument);
                trivial_passes:few_valued predict: the answers, or those of the asked call's
                                        `return`, take at most three values once the parts a
                                        reader computes from an argument are left out: a coin
                                        flip (or a 1-in-3 guess) however it is spelt ('ny'[c],
                                        n % 2 * 2 - 1, (n + 1, c), n + [-1, 1, 2][c];
                                        guesses.py);
                few_examples            predict: fewer than `min_predict_examples` answered
                                        inputs, too few to tell a coin flip (coin_flip needs
                                        3 to see two answers, 5 to see three)
                trivial_passes:lookup   a table of the shown examples (and of those the
                                        description states) plus one guessed value (a shown
                                        output or a constant) passes every example
                trivial_passes:split    a program of partial credit's floor does (a table,
                                        one guess or two split by a one-line condition:
                                        baselines.null_credit; a task whose answer is one
                                        cheap operation, sorted(xs), is one too);
                                        judged where inputs are augmented (a seed's, and a
                                        generated one's unless augment_inputs is 0): on its
                                        own 2-5 hidden examples nearly every task is passed
                                        so (with augment_inputs 0, a wrong program can pass
                                        one)
    adequacy    weak_examples           the examples kill fewer than `min_mutation_score` of the
                                        reference's mutants, leaving out those any input
                                        kills (raising everywhere, or failing everywhere from
                                        code no input reaches: `counted`); none left scores 0
                no_mutants              a generated reference with no mutation site: nothing
                                        shows that its examples test it
                no_killed_mutant        repair: no mutant that returns is caught by a hidden
                                        example, so there is no bug to fix (one that fails
                                        only shown examples is fixed by special-casing them)
    held out    validation_twin:<id>    a validation problem's solution gives every expected
                                        output, or nearly all of those it answers: the task
                                        is that problem (decontamination.py)
                known_twin              a known task's reference (the archive's, a seed's:
                                        decontamination.known_tasks) gives its expected
                                        outputs as a validation twin's would: a copy
                twin_check_slow         its examples kept those solutions busy past the task's
                                        allowance (twin_job.TASK_S): not checked
    integrity   reference_fails_examples the trusted grader does not reproduce the outputs
    infra       sandbox_error           the sandbox failed twice (the task is not judged),
                                        on its reference's check or on the twin run

How outputs become expected values: a driver program (trusted text, run in the sandbox like any
candidate) runs the reference on every input in three fresh interpreters, each with a random
string-hash seed and address layout of its own (`-I` ignores PYTHONHASHSEED, so an optimised
generator has no fixed seeds to fit), twice in each: the inputs in order, then each alone in
a child forked before the reference ran, on a shifted heap (tasks/driver.py), and prints each
result's repr; the host turns the reprs back into values with ast.literal_eval and encodes them
as canonical data. With `augment_inputs` (`seed_augment_inputs` for a seed), a proposal's
inputs are joined by that many mutations of them (tasks/augment.py; drawn AUGMENT_POOL times
over, the ones the floor's guesses get wrong most kept), run by a second driver job: the
reference computes their outputs too, so they can only add examples (a limit hit or a crash on
them drops them, and never the task), except that a disagreement between the interpreters on
them rejects the task as nondeterministic. Examples keep the generator's own inputs first (the
visible ones, and the one a predict task asks, are its own). What the sandboxed program
printed is not trusted: the reference is then checked against the examples by the trusted
grader, out of its process, with exact types, and a task is admitted only if it passes every
one. Dedup (tasks/diversity.py: exact normalised-AST hash and near-duplicates) happens before
admission, in the generation stage.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Sequence

from spade_ray.evaluation import hardest_examples
from spade_ray.execution import canonical
from spade_ray.records import (
    CheckResult,
    ExecStatus,
    IOExample,
    Limits,
    Task,
    TaskFamily,
    TaskSource,
)
from spade_ray.tasks import driver, repair
from spade_ray.tasks.adequacy import MUTANT_ROLES, counted, trusted_checks
from spade_ray.tasks.augment import augmented_inputs
from spade_ray.tasks.decontamination import HeldOut, kinds, twins
from spade_ray.tasks.diversity import normalised_hash
from spade_ray.tasks.format import Proposal
from spade_ray.tasks.guesses import lookup_passes, most_shown, question
from spade_ray.tasks.making import make_task, suite_of
from spade_ray.tasks.stated import stated_first
from spade_ray.tasks.static import signature_reason, static_reason

MAX_REPR_CHARS = 2000  # an output longer than this is dropped (prompts show outputs)
# Augmented inputs drawn per one kept: the reference answers them all, and the examples kept are
# those the floor's guesses get wrong most (evaluation.hardest_examples). Measured on the seed
# programs admitted as generated tasks (/work/notes/s27/sel, augment_inputs 8): mean floor of the
# codegen tasks 0.60 -> 0.46 at 4 (0.54 -> 0.40 before the floor had splits), one-operator
# mutants of the references with credit 30 -> 38 of ~277. The driver job of the extra inputs
# runs 4x the calls (a reference too slow for them loses the extras only, as before).
AUGMENT_POOL = 4


@dataclasses.dataclass(frozen=True)
class AdmissionConfig:
    min_examples: int = 2  # inputs the reference must answer (with plain data)
    # a predict task's, augmented ones included: red-team pass 10 admitted coin flips on 2-4
    # inputs (`h % 3`, strings built at run time), and with augment_inputs 8 a guard that
    # raises on every other input (`if n % 7 != 3: raise`) left only those
    min_predict_examples: int = 5
    visible_examples: int = 2  # shown in codegen and repair prompts; all examples grade
    max_mutants: int = 8
    min_mutation_score: float = 0.5  # fraction of mutants the examples must kill
    max_reference_cpu_s: float = 2.0  # two passes over the inputs (the driver makes
    # driver.INTERPRETERS * driver.PASSES of them and is judged pro rata)
    # a generated proposal's extra inputs, mutations of its own. With 0, its 2-5 hidden examples
    # let a table of the shown ones plus two guesses split by a condition pass nearly every task
    # unseen; 16, not 8: on the seed programs admitted as generated tasks, 8 left 3 such programs
    # passing every example, 16 none (s27: admission CPU 51 -> 65 s there)
    augment_inputs: int = 16
    # a seed's: its hand-written inputs (4-7) left 2-5 hidden examples, and on 16 of the 45
    # codegen tasks a table of the shown ones plus a split of two guesses passed every one
    # (baselines.null_credit 1.0: passed, value 1.0 for a wrong program; mean floor 0.78)
    seed_augment_inputs: int = 16
    check_timeout_s: float = 0.5  # per null-solver / mutant check, at least (_mutant_limits);
    # the reference's own check runs under the task's limits

    def __post_init__(self) -> None:
        if self.min_examples < 1 or self.min_predict_examples < 1 \
                or self.visible_examples < 0 or self.max_mutants < 0 \
                or self.augment_inputs < 0 or self.seed_augment_inputs < 0:
            raise ValueError(f"admission: counts must be positive: {self}")
        if not 0.0 <= self.min_mutation_score <= 1.0:
            raise ValueError(f"admission.min_mutation_score must be in [0, 1], got "
                             f"{self.min_mutation_score}")


@dataclasses.dataclass(frozen=True)
class Admitted:
    """A proposal's verdict: the task made of it (None when rejected) and why not."""

    proposal: Proposal
    family: TaskFamily
    task: Task | None
    reason: str  # "" when admitted
    cpu_s: float  # sandbox CPU spent on it
    mutation_score: float | None = None  # killed / judged mutants (None: no mutant, or
    # not reached)

    @property
    def valid(self) -> bool:
        return self.task is not None


@dataclasses.dataclass(frozen=True)
class _Core:
    """What the run established about a proposal: its examples, the generator's own inputs
    first (`own` of them, in the order written), then the augmented ones."""

    examples: tuple[IOExample, ...]
    own: int
    cpu_s: float
    # every input the reference answered, `examples` being `own` of them and those of the
    # augmented ones kept (AUGMENT_POOL): a coin flip's evidence is its repeated answers, the
    # very ones the floor's guesses get right and the kept ones leave out
    answered: tuple[IOExample, ...] = ()
    lines: tuple[int, ...] = ()  # per answered example, the line of the `return` that answered it
    shown: int = 0  # the first ones a codegen or repair prompt shows (stated.stated_first)


def admit(proposals: Sequence[Proposal], families: Sequence[TaskFamily], topics: Sequence[str],
          executor, limits: Limits, config: AdmissionConfig = AdmissionConfig(),
          source: TaskSource = TaskSource.GENERATED, generator_version: int = -1,
          held_out: Sequence[HeldOut] = (), known: Sequence[HeldOut] = ()) -> list[Admitted]:
    """One verdict per proposal: `families[i]` and `topics[i]` are what proposal i becomes.
    Sandbox work is batched and done once per distinct program and inputs (a seed proposal
    listed once per family runs once): one driver run each, one run for validation twins of
    `held_out` (tasks/decontamination.py), one for twins of the `known` tasks
    (decontamination.known_tasks: a run of their own, so that no generated program runs
    beside the validation solutions) and, for generated ones, one for copies of an earlier
    proposal of the same call (_copies), then the checks of all (adequacy.trusted_checks)."""
    keys = [_job(p, p.inputs) for p in proposals]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # key -> its first index
    static = {key: static_reason(proposals[i].reference) or signature_reason(proposals[i].signature)
              for key, i in first.items()}
    running = [key for key in first if static[key] is None]
    count = _augmenting(config, source)
    extras = {key: augmented_inputs(proposals[first[key]].inputs, count * AUGMENT_POOL,
                                    _seed(proposals[first[key]])) for key in running}
    augmenting = [key for key in running if extras[key]]
    jobs = running + [_job(proposals[first[key]], extras[key]) for key in augmenting]
    runs = executor.run_many([driver.DRIVER] * len(jobs), jobs,
                             limits=driver.driver_limits(limits, config.max_reference_cpu_s))
    extra_runs = dict(zip(augmenting, runs[len(running):]))
    cores: dict[str, _Core | str] = {key: reason for key, reason in static.items() if reason}
    for key, run in zip(running, runs):
        cores[key] = _core(proposals[first[key]], run, config, count, extras[key],
                           extra_runs.get(key))
    found = sorted((key for key, core in cores.items() if isinstance(core, _Core)),
                   key=first.__getitem__)  # in proposal order (red-team s25 F4: reversed, a
    # copy written before a task that sticks its problem was checked after it)
    twin_cpu_s = _copies(cores, found, proposals, first, source, held_out, known, executor,
                         limits)
    checks = trusted_checks({key: (proposals[first[key]], core.examples,
                                   _seed(proposals[first[key]]))
                             for key, core in cores.items() if isinstance(core, _Core)},
                            executor, limits, config.max_mutants, config.check_timeout_s)
    run_cpu = {key: run.cpu_s + (extra_runs[key].cpu_s if key in extra_runs else 0.0)
               for key, run in zip(running, runs)}
    twin_cpu = {key: twin_cpu_s / len(found) for key in found}  # shared evenly
    verdicts = []
    for i, (proposal, key) in enumerate(zip(proposals, keys)):
        core = cores[key]
        if isinstance(core, str):
            verdict = Admitted(proposal, families[i], None, core, run_cpu.get(key, 0.0))
        else:
            verdict = _verdict(proposal, families[i], topics[i], core, checks[key], limits,
                               config, source, generator_version)
        verdict = dataclasses.replace(verdict, cpu_s=verdict.cpu_s + twin_cpu.get(key, 0.0))
        if i != first[key]:  # the sandbox CPU of a shared run is counted once
            verdict = dataclasses.replace(verdict, cpu_s=0.0)
        verdicts.append(verdict)
    return _with_deterministic_bugs(verdicts, executor, limits, config)


def _copies(cores: dict[str, _Core | str], found: list[str], proposals: Sequence[Proposal],
            first: dict[str, int], source: TaskSource, held_out: Sequence[HeldOut],
            known: Sequence[HeldOut], executor, limits: Limits) -> float:
    """Replaces the core of each `found` proposal that copies a validation problem, a known task
    or, for generated ones, an earlier proposal of the same call with its rejection reason; the
    sandbox CPU of the twin runs. Red-team pass 12: one task written twice in other words and
    syntax in one chunk was admitted and paid twice (the known tasks are earlier chunks')."""
    examples = [cores[key].examples for key in found]
    # each proposal is a twin of itself: the first found in proposal order (`own`) is its own
    # key unless an earlier proposal answers it
    chunk = tuple(HeldOut(key, proposals[first[key]].reference, proposals[first[key]].entry_point,
                          kinds(cores[key].examples))  # what each was admitted on (F5)
                  for key in sorted(found, key=first.__getitem__)
                  ) if source is TaskSource.GENERATED else ()
    twin_checks = [twins(examples, held, executor, limits) for held in (held_out, known, chunk)]
    for j, key in enumerate(found):
        twin, copy, own = (check.found[j] for check in twin_checks)
        if any(check.failed for check in twin_checks):
            cores[key] = "sandbox_error"
        elif twin is not None:
            cores[key] = f"validation_twin:{twin}"
        elif copy is not None or (own is not None and first[own] < first[key]):
            cores[key] = "known_twin"
        elif any(check.slow[j] for check in twin_checks):
            cores[key] = "twin_check_slow"
    return sum(check.cpu_s for check in twin_checks)


def _with_deterministic_bugs(verdicts: list[Admitted], executor, limits: Limits,
                             config: AdmissionConfig) -> list[Admitted]:
    """The verdicts, a repair task whose buggy program answers differently in fresh
    interpreters rejected as nondeterministic (repair.bugs_differ)."""
    repairs = [i for i, v in enumerate(verdicts) if v.task is not None and v.task.buggy]
    found = repair.bugs_differ([verdicts[i].task for i in repairs], executor, limits,
                               config.max_reference_cpu_s)
    out = list(verdicts)
    for i, (differs, cpu_s) in zip(repairs, found):
        v = verdicts[i]
        out[i] = (Admitted(v.proposal, v.family, None, "nondeterministic", v.cpu_s + cpu_s,
                           v.mutation_score) if differs
                  else dataclasses.replace(v, cpu_s=v.cpu_s + cpu_s))
    return out


def _augmenting(config: AdmissionConfig, source: TaskSource) -> int:
    """The augmented inputs a proposal of `source` gets."""
    return config.augment_inputs if source is TaskSource.GENERATED else config.seed_augment_inputs


def _job(proposal: Proposal, inputs: Sequence[tuple]) -> str:
    return driver.job(proposal.reference, proposal.entry_point, inputs)


def _seed(proposal: Proposal) -> int:
    """The proposal's own seed for sampling its mutants and augmented inputs: of its program's
    normalised form, so that a generator cannot draw another sample by respacing it."""
    return int(normalised_hash(proposal.reference)[:8], 16)


def _core(proposal: Proposal, run, config: AdmissionConfig, count: int,
          extras: Sequence[tuple] = (), extra_run=None) -> _Core | str:
    """The examples the driver's runs establish (`count` of the `extras` kept), or the
    rejection reason."""
    results = driver.answers(run, len(proposal.inputs), config.max_reference_cpu_s)
    if isinstance(results, str):
        return results
    own, shown = stated_first(_examples(proposal.inputs, results), proposal.description,
                               config.visible_examples)
    more: list[tuple[IOExample, int]] = []
    if extra_run is not None:
        extra_results = driver.answers(extra_run, len(extras), config.max_reference_cpu_s)
        if extra_results in ("nondeterministic", "set_order"):
            return extra_results
        if not isinstance(extra_results, str):  # a limit or crash on extras only loses them
            more = _examples(extras, extra_results)
    if not own or len(own) + len(more) < config.min_examples:
        return "reference_raises"
    answered = own + more
    if len(more) > count:
        keep = hardest_examples([e for e, _ in answered], len(own), shown, count)
        more = [more[i] for i in keep]
    examples = tuple(e for e, _ in own + more)
    if len({e.expected for e in examples}) == 1:
        return "constant_outputs"
    return _Core(examples, len(own),
                 run.cpu_s + (extra_run.cpu_s if extra_run is not None else 0.0),
                 tuple(e for e, _ in answered), tuple(line for _, line in answered), shown)


def _examples(inputs: Sequence[tuple], results: list) -> list[tuple[IOExample, int]]:
    """The examples of the inputs the reference answered with plain data, each with the line
    of the `return` that answered it (0 when the driver did not say)."""
    examples = []
    for args, result in zip(inputs, results):
        ok = isinstance(result, list) and len(result) in (2, 3) and result[0] == "ok"
        text = result[1] if ok else None
        if not isinstance(text, str) or len(text) > MAX_REPR_CHARS:
            continue
        line = result[2] if len(result) == 3 and isinstance(result[2], int) else 0
        try:
            examples.append((canonical.example(args, ast.literal_eval(text)), line))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError,
                canonical.NotPlainData):
            continue  # not plain data (an object, NaN, a frozenset): not an example
    return examples


def _verdict(p: Proposal, family: TaskFamily, topic: str, core: _Core,
             checks: list[tuple[str, str, CheckResult]], limits: Limits,
             config: AdmissionConfig, source: TaskSource, generator_version: int) -> Admitted:
    cpu = core.cpu_s + sum(r.execution.cpu_s for _, _, r in checks)
    reject = functools.partial(Admitted, p, family, None, cpu_s=cpu)
    reference = checks[0][2]
    if reference.execution.status is ExecStatus.SANDBOX_ERROR:
        return reject("sandbox_error")
    if not reference.passed:
        return reject("reference_fails_examples")
    for role, _, result in checks:
        if role.startswith("null:") and result.passed:
            return reject(f"trivial_passes:{role.split(':', 1)[1]}")
    suite, split = suite_of(core.examples, p.entry_point), _augmenting(config, source) > 0
    if family is not TaskFamily.PREDICT and (lookup := lookup_passes(suite, core.shown, split)):
        return reject(f"trivial_passes:{lookup}")
    asked = core.own - 1
    if family is TaskFamily.PREDICT:
        asked = question(p, core.answered, core.own, core.lines,  # (a seed's are hand-written)
                         config.min_predict_examples if source is TaskSource.GENERATED else 0)
        if isinstance(asked, str):
            return reject(asked)
    run = [(role, code, r) for role, code, r in checks
           if role in MUTANT_ROLES.values() and r.execution.status is not ExecStatus.SANDBOX_ERROR]
    if not run and source is TaskSource.GENERATED:
        return reject("no_mutants")
    judged = [r for role, _, r in run if counted(role, r)][:config.max_mutants]
    killed = sum(not r.passed for r in judged)
    score = killed / len(judged) if judged else (0.0 if run else None)
    if score is not None and score < config.min_mutation_score:
        return Admitted(p, family, None, "weak_examples", cpu, score)
    buggy, bug = None, None
    if family is TaskFamily.REPAIR:
        bugs = [(code, r) for role, code, r in run if counted(role, r)]
        buggy = repair.shown_bug(bugs, core.shown)
        if buggy is None:
            return Admitted(p, family, None, "no_killed_mutant", cpu, score)
        bug = dict(bugs)[buggy]
    task = make_task(p, family, topic, core.examples, asked, buggy, limits,
                     core.shown, source, generator_version)
    if family is not TaskFamily.PREDICT:
        task = dataclasses.replace(task, most_shown=most_shown(suite, core.shown, bug, split))
    return Admitted(p, family, task, "", cpu, score)
