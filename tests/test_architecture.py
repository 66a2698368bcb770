"""The folders are the architecture: read every module's imports (top level and inside functions) and hold
them to the tiers. A step may import the tiers below it, never another step; nothing below the steps imports
a step (only the CLI, the spine above them, does)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from .conftest import env

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"
STEPS = PACKAGE / "steps"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str | None = None) -> set[str]:
    """Every module the file imports, by absolute name (relative imports resolved as if the file were the
    module `name`, by default its own)."""
    name = name or module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pipeline.steps import train`
    return found


def step_of(module: str) -> str | None:
    """The step a module belongs to ('ingest' for pipeline.steps.ingest.samples), or None (a name from the
    steps' package itself, such as its config checks, is no step)."""
    parts = module.split(".")
    real = len(parts) > 2 and ((STEPS / parts[2]).is_dir() or (STEPS / f"{parts[2]}.py").exists())
    return parts[2] if real and parts[:2] == ["pipeline", "steps"] else None


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    # the checks below are only as good as this: imports at top level, in functions, relative, from-lists
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import pipeline.steps.train\n"
        "def f():\n    from pipeline.steps.merge.plan import x\n"
        "from . import sibling\n"
        "from ..search import y\n"
        "from pipeline.steps import stage\n"
    )
    found = imported_modules(probe, "pipeline.steps.ingest.probe")
    assert {step_of(m) for m in found} - {None} == {"train", "merge", "ingest", "search", "stage"}
    assert "pipeline.steps.ingest.sibling" in found and "pipeline.steps.search.y" in found


def test_no_step_imports_another_step() -> None:
    crossings = []
    for path in STEPS.rglob("*.py"):
        own = step_of(module_name(path))
        for imported in imported_modules(path):
            other = step_of(imported)
            if other is not None and own is not None and other != own:
                crossings.append(f"{module_name(path)} imports {imported}")
    assert not crossings, "steps import other steps:\n" + "\n".join(sorted(crossings))


def test_nothing_below_the_steps_imports_a_step() -> None:
    above = {"pipeline.cli"}  # the spine that runs the steps
    crossings = []
    for path in modules():
        name = module_name(path)
        if step_of(name) is not None or name in above or name == "pipeline.steps":
            continue
        crossings += [f"{name} imports {m}" for m in imported_modules(path) if step_of(m) is not None]
    assert not crossings, "modules below the steps import steps:\n" + "\n".join(sorted(crossings))


# The tiers from the bottom up (pipeline/__init__.py's map says what each holds): a module may import its
# own tier and the tiers below, never one above. The longest prefix names a module's tier.
TIERS = [
    ["pipeline", "pipeline.paths"],
    ["pipeline.storage"],
    ["pipeline.reporting"],
    ["pipeline.config"],
    ["pipeline.runtime"],
    ["pipeline.formats"],
    ["pipeline.staging"],
    ["pipeline.data"],
    ["pipeline.ensemble"],
    ["pipeline.training"],
    ["pipeline.design"],
    ["pipeline.simulators"],
    ["pipeline.online"],
    ["pipeline.steps"],
    ["pipeline.cli"],
]


def tier_of(module: str) -> int:
    matches = [
        (len(p), t)
        for t, prefixes in enumerate(TIERS)
        for p in prefixes
        if module == p or module.startswith(p + ".")
    ]
    assert matches, f"{module} is in no tier: add its folder to TIERS and to pipeline/__init__.py's map"
    return max(matches)[1]


def test_every_import_runs_down_the_tiers() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    # every folder placed
    assert {f"pipeline.{f}" for f in folders} <= {p for prefixes in TIERS for p in prefixes}
    upward = []
    for path in modules():
        name = module_name(path)
        own = tier_of(name)
        for imported in imported_modules(path):
            if imported.startswith("pipeline") and tier_of(imported) > own:
                upward.append(f"{name} imports {imported}")
    assert not upward, "imports that run back up a tier:\n" + "\n".join(sorted(upward))
    assert tier_of("pipeline.staging.plan") > tier_of("pipeline.formats.shards") > tier_of("pipeline.config")


def test_the_workflow_is_lint_clean() -> None:
    # Snakemake's linter exits non-zero and lists the lints when it finds any
    snakemake = str(Path(sys.executable).parent / "snakemake")
    done = subprocess.run(
        [snakemake, "--lint"], cwd=PACKAGE.parent, capture_output=True, text=True, env=env()
    )
    assert done.returncode == 0 and "good condition" in done.stdout + done.stderr, done.stdout + done.stderr


def test_no_test_module_imports_another() -> None:
    # shared test code lives in conftest.py (fixtures, commands) and helpers.py
    tests = Path(__file__).resolve().parent
    crossings = []
    for path in sorted(tests.glob("test_*.py")):
        for imported in imported_modules(path, f"tests.{path.stem}"):
            if (
                imported.split(".")[1:2]
                and imported.split(".")[1].startswith("test_")
                and imported.startswith("tests.")
            ):
                crossings.append(f"{path.name} imports {imported}")
    assert not crossings, "\n".join(crossings)


def test_no_test_only_code_in_the_package() -> None:
    # names the tests used to import from pipeline/ that only tests needed
    for name in ("def tfrecord_dataset", "def hdf5_records(shard"):
        holders = [str(p) for p in PACKAGE.rglob("*.py") if name in p.read_text()]
        assert not holders, f"{name} is test-only code: it belongs in tests/helpers.py ({holders})"


def test_overriding_one_rules_tasks_keeps_the_others(tmp_path: Path) -> None:
    # a command line's --set-resources replaces a profile's set-resources as a whole: the task counts
    # live in rules/common.smk so that overriding one rule leaves the others' ranks as they are
    snakemake = str(Path(sys.executable).parent / "snakemake")
    args = [
        snakemake,
        "-n",
        "-p",
        "--set-resources",
        "stage:tasks=3",
        "--config",
        f"workdir={tmp_path / 'w'}",
    ]
    done = subprocess.run(args, cwd=PACKAGE.parent, capture_output=True, text=True, env=env())
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.findall(r"--tasks (\d+) --config \S+ +(?:--overrides \S+ )?(\w+)", done.stdout)
    expected = {"simulate": 2, "ingest": 2, "convert": 2, "merge": 2, "stage": 3, "search": 2, "train": 2}
    expected["throughput"] = 1  # a figure, one rank
    assert {step: int(n) for n, step in found} == expected, done.stdout


# ------------------------------------------------------------------- what only a task or a runtime knows


def name_branches(path: Path, names: set[str], near: str = "") -> list[str]:
    """Where the module compares with one of `names` (==, !=, in, not in: a string constant on either side
    or in a tuple, list or set there), looks one up as a key (`summary["r2"]`), keys a dict literal by one
    or lists one (a module-level table of scores); `near`: only comparisons whose source mentions it."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    found = []

    def constants(node: ast.AST) -> set[str]:
        items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
        return {n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)}

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hit = set().union(*(constants(n) for n in [node.left, *node.comparators])) & names
            if hit and near in (ast.get_source_segment(source, node) or ""):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} compares with {sorted(hit)}")
        elif isinstance(node, ast.Subscript) and not near and constants(node.slice) & names:
            found.append(
                f"{path.relative_to(PACKAGE.parent)}:{node.lineno} looks up {sorted(constants(node.slice))}"
            )
        elif (
            isinstance(node, ast.Dict)
            and not near
            and constants(ast.Tuple([k for k in node.keys if k])) & names
        ):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} keys a table by a task or score")
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and not near and constants(node) & names:
            found.append(
                f"{path.relative_to(PACKAGE.parent)}:{node.lineno} lists {sorted(constants(node) & names)}"
            )
    declared = {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["TASKS"]
    }
    lines = {getattr(n, "lineno", 0) for n in ast.walk(tree) if id(n) in declared}
    return [f for f in found if int(f.split(":")[1].split()[0]) not in lines]


def test_no_module_outside_the_tasks_branches_on_a_task_or_its_scores() -> None:
    """A task is one file (pipeline/training/tasks/): its name and its score names appear in no comparison
    or key lookup elsewhere, so a new task (the surrogate) touches no other module. A built-in model's
    TASKS (which tasks it does) is the model's own knowledge, read through the task object."""
    from pipeline.training.tasks import TASKS

    names = set(TASKS) | {score for task in TASKS.values() for score in task.scores}
    tasks = PACKAGE / "training" / "tasks"
    leaks = [hit for path in modules() if tasks not in path.parents for hit in name_branches(path, names)]
    assert not leaks, "task knowledge outside pipeline/training/tasks/:\n" + "\n".join(leaks)
    assert name_branches(tasks / "regression.py", names)  # the check sees a task's own lookups


def task_names_written(path: Path, names: set[str]) -> list[str]:
    """Where a module writes a task's name as a string of its own (a value, an argument), but in a model's
    TASKS (the tasks it does) or its NAME (a model may share a task's name: the autoencoder)."""
    tree = ast.parse(path.read_text())
    registered = {
        id(c)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} & {"TASKS", "NAME"}
        for c in ast.walk(n.value)
    }
    where = path.relative_to(PACKAGE.parent) if PACKAGE in path.parents else path.name
    return [
        f"{where}:{node.lineno} writes {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in registered
    ]


def test_no_module_outside_the_tasks_writes_a_tasks_name(tmp_path: Path) -> None:
    """What a reader or `sim2dl inspect` proposes is a kind of data (`trajectory`), and the task that takes
    it says so (Task.proposed_for, tasks.task_for): no module outside the tasks writes a task's name, so a
    new task that takes a kind of data is found without touching them. A planted proposal is caught."""
    from pipeline.training.tasks import TASKS

    names, tasks = set(TASKS), PACKAGE / "training" / "tasks"
    written = [
        hit for path in modules() if tasks not in path.parents for hit in task_names_written(path, names)
    ]
    assert not written, "a task's name written outside pipeline/training/tasks/:\n" + "\n".join(written)
    planted = tmp_path / "planted.py"
    planted.write_text('TASKS = ("regression",)\nNAME = "autoencoder"\nchosen = {"task": "next_state"}\n')
    assert task_names_written(planted, names) == ["planted.py:3 writes 'next_state'"]


def test_no_module_outside_the_runtimes_branches_on_the_runtime_none() -> None:
    """What running without a container means is NoRuntime's (pipeline/runtime/runtimes/none.py:
    `contained`, `program`), not a test of container.runtime against "none" elsewhere."""
    runtimes = PACKAGE / "runtime" / "runtimes"
    outside = [path for path in modules() if runtimes not in path.parents]
    leaks = [hit for path in outside for hit in name_branches(path, {"none"}, "runtime")]
    assert not leaks, "tests of the runtime's name outside pipeline/runtime/runtimes/:\n" + "\n".join(leaks)


def task_flags() -> set[str]:
    """What one task is, read as a flag: the base Task's flags that a task sets (a bool, or a number it
    overrides, as `needs_labels`), and every public attribute or method only a task's own class has."""
    import inspect

    from pipeline.training.tasks import TASKS, Task

    base = {n for n, v in vars(Task).items() if not n.startswith("_")}
    flags = {n for n in base if isinstance(vars(Task)[n], bool | int) and not isinstance(vars(Task)[n], str)}
    own: set[str] = set()
    for task in TASKS.values():
        for cls in inspect.getmro(task)[: inspect.getmro(task).index(Task)]:
            tree = ast.parse(inspect.getsource(cls))
            own |= {n for n in vars(cls) if not n.startswith("_")}
            own |= {
                t.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self"
            }
    return (flags | own) - (base - flags) - {"max_examples"}  # a figure's example count is a hook's number


def flag_reads(source: str, flags: set[str], where: str) -> list[str]:
    """`task.X` (or `self.task.X`, `session.task.X`) for X in flags: reads of one task's attributes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in flags:
            held = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            if held and held.endswith("task"):
                found.append(f"{where}:{node.lineno} reads {held}.{node.attr}")
    return found


# Reads of one task's flags outside pipeline/training/tasks/ still to be turned into the tasks' hooks
# (issue #75), by file and flag: the count may only fall. A new one fails the test.
FLAG_READS_LEFT: dict[tuple[str, str], int] = {}


def test_no_module_outside_the_tasks_reads_one_tasks_flags_beyond_those_left() -> None:
    """What the pipeline needs of a task is a hook every task answers (Task.after_training: a next state's
    rollout), not a flag only one task sets that other modules test. The reads left (FLAG_READS_LEFT) only
    fall; a planted branch on a flag is caught."""
    flags = task_flags()
    assert {"needs_labels", "rolled_out", "horizon", "latent"} <= flags, flags
    hooks = {"after_training", "samples", "samples_per_record", "loss", "vector_channels", "bottleneck"}
    assert not hooks & flags  # hooks every task answers
    tasks = PACKAGE / "training" / "tasks"
    counts: dict[tuple[str, str], int] = {}
    for path in modules():
        if tasks in path.parents:
            continue
        where = str(path.relative_to(PACKAGE.parent))
        for hit in flag_reads(path.read_text(), flags, where):
            key = (where, hit.rsplit(".", 1)[1])
            counts[key] = counts.get(key, 0) + 1
    over = {k: n for k, n in counts.items() if n > FLAG_READS_LEFT.get(k, 0)}
    assert not over, (
        f"new reads of one task's flags outside pipeline/training/tasks/ (make them hooks): {over}"
    )
    assert counts == FLAG_READS_LEFT, f"fewer reads than FLAG_READS_LEFT records: lower it to {counts}"
    planted = "def f(session):\n    if session.task.rolled_out:\n        return 1\n"
    assert flag_reads(planted, flags, "planted.py") == ["planted.py:2 reads task.rolled_out"]
    print(f"reads of one task's flags outside tasks/: {sum(counts.values())}")


# Modules outside pipeline/training/tasks/ that call a Task hook (task.HOOK or X.task.HOOK): 18 at 8bf72ac,
# 17 once the ends of a training run were written once (pipeline/training/run.py, which absorbed finish.py).
# A new capability that needs another module to call the task raises this: make it a hook one of these calls.
TASK_HOOK_CALLERS = 17


def test_the_modules_that_call_task_hooks_do_not_grow() -> None:
    """How far a task reaches into the pipeline: the modules outside pipeline/training/tasks/ that call a
    method or property of Task on a task object, counted from the source, at most TASK_HOOK_CALLERS."""
    base = ast.parse((PACKAGE / "training" / "tasks" / "base.py").read_text())
    [task_class] = [n for n in base.body if isinstance(n, ast.ClassDef) and n.name == "Task"]
    hooks = {n.name for n in task_class.body if isinstance(n, ast.FunctionDef)}

    def on_a_task(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "task") or (
            isinstance(node, ast.Attribute) and node.attr == "task"
        )

    callers = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "training/tasks" not in path.as_posix()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in hooks and on_a_task(node.value)
    }
    assert "training/run.py" in callers and "training/epochs.py" in callers  # the count sees real calls
    assert len(callers) <= TASK_HOOK_CALLERS, f"{len(callers)} modules call task hooks: {sorted(callers)}"


def test_no_function_over_60_lines_or_8_parameters() -> None:
    """#91's reading limits, kept: no function of the package over 60 lines (decorators aside) or 8
    parameters (self, cls, *args and **kwargs aside); group parameters into the objects they describe."""
    over = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                named = [
                    a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")
                ]
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if len(named) > 8 or lines > 60:
                    over.append(
                        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {len(named)} "
                        f"parameters, {lines} lines"
                    )
    assert not over, "\n".join(over)
