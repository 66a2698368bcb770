"""`sim2dl`: one subcommand per workflow step. Run under mpiexec/srun for several ranks.

Each subcommand loads and validates the config, calls the step's core function, and turns errors into
one clear message and a non-zero exit; under MPI a failure on one rank stops the whole job.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import resource
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from pipeline import MB, CollectiveError, Sim2dlError
from pipeline import config as cfg
from pipeline.runtime.mpi import mpi_library, world
from pipeline.runtime.runtimes import runtime_of
from pipeline.runtime.startup import announce_started, join_streams_if_asked
from pipeline.steps import load as checked_load
from pipeline.steps import validated


def _common(parser: argparse.ArgumentParser, config_required: bool = True) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        required=config_required,
        default=None,
        help="YAML config, validated against the schema (a workflow run's is {workdir}/config.resolved.yaml)"
        + ("" if config_required else "; default: the demo config, config/config.yaml"),
    )
    parser.add_argument(
        "--overrides",
        type=Path,
        action="append",
        default=[],
        metavar="YAML",
        help="YAML merged on top of the config, section by section (repeatable), e.g. search/best.yaml",
    )


# Each handler takes the whole config (for the workdir's paths) and the step's view of it
# (config.step_config: only the keys the step reads), which it hands to the step.
def cmd_simulate(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.simulate import simulate

    out = args.out or cfg.source_dir(config)
    # The runtime settings only shape how an ensemble's runs enter simulate.image: not a rerun trigger.
    return simulate(view["simulate"], out, comm, config["container"])


def cmd_ingest(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.ingest.step import ingest

    return ingest(view, args.source or cfg.source_dir(config), args.out or cfg.layout(config).ingest, comm)


def cmd_convert(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.convert import convert

    lay = cfg.layout(config)
    return convert(view, args.ingest or lay.ingest, args.out or lay.convert, comm)


def cmd_merge(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.merge.step import merge

    lay = cfg.layout(config)
    return merge(view, args.ingest or lay.ingest, args.convert or lay.convert, args.out or lay.merged, comm)


def cmd_stage(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.stage import stage

    lay = cfg.layout(config)
    return stage(view, args.merged or lay.merged, args.summary or lay.stage_summary, comm)


def cmd_train(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.train import train

    lay = cfg.layout(config)
    merged, staged, out = (
        args.merged or lay.merged,
        args.stage_summary or lay.stage_summary,
        args.out or lay.train,
    )
    return train(view, merged, staged, out, comm, baseline=not args.no_baseline, trial=args.trial)


def cmd_online(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.online import online

    lay = cfg.layout(config)
    return online(view, args.raw or cfg.source_dir(config), args.out or lay.train, comm, config["container"])


def cmd_search(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.search import search

    lay = cfg.layout(config)
    out, merged, staged = (
        args.out or lay.search,
        args.merged or lay.merged,
        args.stage_summary or lay.stage_summary,
    )
    return search(view, out, merged, staged, comm, role=args.role)


def cmd_sweep(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.sweep import summarise

    if "sweep" not in config:
        raise Sim2dlError("this config has no 'sweep' section (e.g. --config config/sweeps/lr_shards.yaml)")
    return summarise(view)


def cmd_throughput(
    args: argparse.Namespace, config: dict[str, Any], view: dict[str, Any], comm: Any
) -> dict[str, Any]:
    from pipeline.steps.throughput import throughput

    lay = cfg.layout(config)
    return throughput(lay, args.out or lay.throughput_plot)


MERGED = ("--merged", "merge output directory (default: {workdir}/merged)")
INGEST = ("--ingest", "ingest output directory (default: {workdir}/ingest)")
STAGE_SUMMARY = ("--stage-summary", "stage summary (default: {workdir}/staged/summary.json)")

# (step, help, handler, path options): every option is a path with the workdir layout as its default.
STEPS: list[tuple[str, str, Any, list[tuple[str, str]]]] = [
    (
        "simulate",
        "write the built-in simulator's samples, one HDF5 file each",
        cmd_simulate,
        [("--out", "output directory (default: {workdir}/raw)")],
    ),
    (
        "ingest",
        "scan and validate input files into a manifest and packed parts",
        cmd_ingest,
        [
            ("--source", "directory to scan (default: source.path)"),
            ("--out", "output directory (default: {workdir}/ingest)"),
        ],
    ),
    (
        "convert",
        "select, transform and compute global statistics",
        cmd_convert,
        [INGEST, ("--out", "output directory (default: {workdir}/convert)")],
    ),
    (
        "merge",
        "pack converted samples into sorted shards with an index and metadata",
        cmd_merge,
        [
            INGEST,
            ("--convert", "convert output directory (default: {workdir}/convert)"),
            ("--out", "output directory (default: {workdir}/merged)"),
        ],
    ),
    (
        "stage",
        "copy shards to node-local storage, each byte read once from the shared FS",
        cmd_stage,
        [MERGED, ("--summary", "summary file (default: {workdir}/staged/summary.json)")],
    ),
    (
        "train",
        "data-parallel training (TensorFlow + Horovod) from the staged shards",
        cmd_train,
        [
            MERGED,
            STAGE_SUMMARY,
            ("--out", "output directory (default: {workdir}/train)"),
        ],
    ),
    (
        "online",
        "train while the ensemble runs (train.online): simulation ranks send each run's samples to training "
        "ranks",
        cmd_online,
        [
            ("--raw", "the ensemble's output directory (default: {workdir}/raw)"),
            ("--out", "output directory (default: {workdir}/train)"),
        ],
    ),
    (
        "search",
        "hyperparameter search with BOHB: rank 0 the master, other ranks workers",
        cmd_search,
        [MERGED, STAGE_SUMMARY, ("--out", "output directory (default: {workdir}/search)")],
    ),
    (
        "throughput",
        "a figure of the data steps' times and rates, from their logs: {workdir}/report/throughput.png",
        cmd_throughput,
        [("--out", "the figure (default: {workdir}/report/throughput.png)")],
    ),
    (
        "sweep",
        "compare the points of a finished sweep: summary.csv and summary.png in sweep.workdir",
        cmd_sweep,
        [],
    ),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sim2dl", description=__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    for name, (help_text, _) in TOOLS.items():
        sub.add_parser(name, help=help_text)
    for name, help_text, handler, options in STEPS:
        p = sub.add_parser(name, help=help_text)
        _common(p)
        for flag, text in options:
            p.add_argument(flag, type=Path, help=text)
        p.set_defaults(func=handler)
        if name == "train":
            p.add_argument(
                "--no-baseline",
                action="store_true",
                help="skip the classical baseline (a search trial: only its validation loss counts)",
            )
            p.add_argument(
                "--trial",
                type=json.loads,
                metavar="JSON",
                help="a search trial's {id, hyperparameters}: written for TensorBoard's HParams dashboard",
            )
        if name == "search":
            p.add_argument(
                "--role",
                choices=("all", "master", "worker"),
                default="all",
                help="all: one MPI job (rank 0 master, other ranks workers); master: rank 0 only, waits for "
                "search.workers joining workers; worker: join the master found in {out}/run",
            )
    return parser


def reports_errors(prog: str) -> Any:
    """One error wrapper for the tool subcommands: a Sim2dlError becomes one line on stderr and exit 2."""

    def wrap(tool: Any) -> Any:
        def run(argv: list[str]) -> int:
            try:
                return tool(argv)
            except Sim2dlError as e:
                print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
                return 2

        run.__doc__ = tool.__doc__
        return run

    return wrap


def launch_parser() -> argparse.ArgumentParser:
    """`sim2dl launch`'s command line."""
    parser = argparse.ArgumentParser(
        prog="sim2dl launch",
        description="Run `sim2dl STEP ...` on N ranks: the MPI launcher outside, one container per rank "
        "inside (config section 'container'). The config is passed to the step.",
    )
    _common(parser)
    parser.add_argument("--tasks", type=int, default=1, help="MPI ranks")
    parser.add_argument(
        "--mpi", default="auto", help="auto (srun inside Slurm, else mpiexec), none, or a launcher"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command line and exit")
    parser.add_argument("step", nargs=argparse.REMAINDER, help="STEP [ARGS...]")
    return parser


@reports_errors("sim2dl launch")
def launch_main(argv: list[str]) -> int:
    """`sim2dl launch`: run a step through the MPI launcher and the configured container runtime."""
    from pipeline.runtime.launch import (
        data_directories,
        prepare_mount_points,
        srun_environment_conflicts,
        step_argv,
    )
    from pipeline.runtime.processes import with_parent_death_signal
    from pipeline.runtime.startup import StartupPolicy, launch_with_retries, rank_environment, same_file

    parser = launch_parser()
    args = parser.parse_args(argv)
    if args.step[:1] == ["--"]:
        args.step = args.step[1:]
    if not args.step or args.step[0] not in [s[0] for s in STEPS]:
        parser.error(f"name a step: {', '.join(s[0] for s in STEPS)}")
    config = checked_load(args.config, override_files=args.overrides)
    step_args = [args.step[0], *_config_options(args), *args.step[1:]]
    data_dirs = data_directories(config)
    prepare_mount_points(config["container"], data_dirs, Path.cwd())
    # the ranks' start-up barrier reports with this token (pipeline.runtime.startup): every runtime gets it
    # as a container variable, a launch without a container through the environment
    token = secrets.token_hex(8) if not args.dry_run else "TOKEN"
    # output and errors to one file (a rule's step log): the ranks write both on one stream, relayed as one
    one_stream = not args.dry_run and same_file(sys.stdout.fileno(), sys.stderr.fileno())
    # a launch without a container: launch_with_retries sets them
    if runtime_of(config["container"]).contained:
        config["container"]["env"] = {**config["container"]["env"], **rank_environment(token, one_stream)}
    command = step_argv(config, args.mpi, args.tasks, step_args, data_dirs, Path.cwd())
    print("sim2dl launch: " + shlex.join(command), file=sys.stderr, flush=True)
    if args.dry_run:
        print(json.dumps(command))
        return 0
    # ch-run refuses to start without it (batch jobs may lack it)
    os.environ.setdefault("USER", getpass.getuser())
    for name in srun_environment_conflicts(command):
        os.environ.pop(name, None)
    if args.mpi == "none":  # one process, no launcher: nothing to start up
        try:
            os.execvp(command[0], command)  # no shell: every argument arrives as given
        except OSError as e:
            raise Sim2dlError(f"cannot run {command[0]}: {e.strerror}") from e
    policy = StartupPolicy(
        retries=config["launch"]["startup_retries"], timeout_s=config["launch"]["startup_timeout_s"]
    )
    try:
        return launch_with_retries(
            with_parent_death_signal(command), token, policy, os.environ, one_stream=one_stream
        )
    except OSError as e:
        raise Sim2dlError(f"cannot run {command[0]}: {e.strerror}") from e


def image_parser() -> argparse.ArgumentParser:
    """`sim2dl image`'s command line: one subcommand per action."""
    from pipeline.runtime import container_image as image
    from pipeline.runtime import oci_registry as registry

    parser = argparse.ArgumentParser(
        prog="sim2dl image", description=image.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="build or update the image under container.build_dir (needs root)")
    build.add_argument(
        "--format",
        action="append",
        choices=image.FORMATS,
        default=[],
        help="dir (always), squashfs, oci; repeatable",
    )
    raw = {"description": registry.__doc__, "formatter_class": argparse.RawDescriptionHelpFormatter}
    push = sub.add_parser("push", help="push the built OCI archive (built when missing) to a registry", **raw)
    push.add_argument("ref", nargs="?", help="HOST[:PORT]/NAME[:TAG] (default container.name:container.tag)")
    push.add_argument(
        "--archive", type=Path, help="an OCI archive to push instead of the one `image build` makes"
    )
    pull = sub.add_parser("pull", help="pull the image from a registry into the configured runtime", **raw)
    pull.add_argument("ref", nargs="?", help="HOST[:PORT]/NAME[:TAG] (default container.name:container.tag)")
    pull.add_argument(
        "--missing", action="store_true", help="only when the runtime lacks the image (none: never)"
    )
    ref = sub.add_parser("ref", help="print the image reference the configured runtime is given")
    host = sub.add_parser(
        "host-mpi",
        help="copy the host's MPICH-ABI library and its dependencies into one "
        "directory for container.host_mpi.paths",
    )
    host.add_argument(
        "--lib", type=Path, help="the library (default: libmpi.so.12 or libmpich.so.12 from ldconfig)"
    )
    host.add_argument("--out", type=Path, required=True, help="directory to create (replaced if it exists)")
    for p in (build, push, pull, ref, host):
        _common(p, config_required=False)
    return parser


def image_action(args: argparse.Namespace, settings: dict[str, Any]) -> Any:
    """What `sim2dl image ACTION` does, and its result (a reference, or a JSON-able record)."""
    from pipeline.runtime import container_image as image
    from pipeline.runtime import oci_registry as registry

    if args.action == "ref":
        return image.image_reference(settings)
    if args.action == "host-mpi":
        from pipeline.runtime import host_mpi as hostmpi

        library = args.lib or hostmpi.system_library()
        if library is None:
            raise Sim2dlError("no MPICH-ABI library found by ldconfig; name it with --lib")
        return {k: v for k, v in hostmpi.collect(library, args.out).items() if k != "version"}
    if args.action == "push":
        target = registry.configured_reference(settings, args.ref)
        archive = args.archive or Path(image.build(settings, ["dir", "oci"])["outputs"]["oci"])
        return registry.push(settings, target, archive)
    if args.action == "pull":
        from pipeline.runtime.doctor import check_image

        if args.missing and (
            not runtime_of(settings).contained or check_image(settings).status in ("ok", "skip")
        ):
            return {"pulled": None, "image": image.image_reference(settings)}
        return registry.pull(settings, registry.configured_reference(settings, args.ref))
    return image.build(settings, ["dir", *args.format])


@reports_errors("sim2dl image")
def image_main(argv: list[str]) -> int:
    """`sim2dl image build|push|pull|ref|host-mpi`: the container image named by container.name/tag."""
    args = image_parser().parse_args(argv)
    config = _load_or_demo("sim2dl image", args)
    result = image_action(args, config["container"])
    print(result if isinstance(result, str) else json.dumps(result), flush=True)
    return 0


@reports_errors("sim2dl doctor")
def doctor_main(argv: list[str]) -> int:
    """`sim2dl doctor`: check the runtime, image, host MPI and node-local storage before a long job."""
    from pipeline.runtime import doctor

    parser = argparse.ArgumentParser(prog="sim2dl doctor", description=doctor.__doc__)
    _common(parser, config_required=False)
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    args = parser.parse_args(argv)
    config = _load_or_demo("sim2dl doctor", args)
    checks = doctor.doctor(config)
    print(doctor.as_json(checks)) if args.json else doctor.report(checks)
    return 1 if any(c.status == "fail" for c in checks) else 0


@reports_errors("sim2dl inspect")
def inspect_main(argv: list[str]) -> int:
    """`sim2dl inspect`: what a few of the files hold, and a starter config for them."""
    from pipeline.steps import inspect as inspection

    parser = argparse.ArgumentParser(
        prog="sim2dl inspect",
        description=inspection.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("data", help="a directory, a glob (quote it: 'data/**/*.h5') or one file")
    parser.add_argument(
        "--files", type=int, default=8, help="how many files to open, spread over the matches"
    )
    parser.add_argument("--write", type=Path, metavar="YAML", help="write a starter config there")
    args = parser.parse_args(argv)
    if args.files < 1:
        parser.error("--files must be at least 1")
    text, _ = inspection.inspect(args.data, args.files, args.write)
    print(text)
    return 0


@reports_errors("sim2dl status")
def status_main(argv: list[str]) -> int:
    """`sim2dl status WORKDIR`: where a workflow stands, from the files its steps write."""
    from pipeline.reporting import status

    parser = argparse.ArgumentParser(
        prog="sim2dl status", description=status.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("workdir", type=Path, help="the workflow's directory (the config's workdir)")
    parser.add_argument("--json", action="store_true", help="print the state as one JSON object")
    parser.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=10.0,
        metavar="SECONDS",
        help="print it again every SECONDS (default 10) until interrupted",
    )
    args = parser.parse_args(argv)
    if args.watch is not None and args.watch <= 0:
        parser.error("--watch needs a positive number of seconds")
    try:
        while True:
            try:
                state = status.campaign_status(args.workdir)
            except FileNotFoundError as e:
                raise Sim2dlError(str(e)) from None
            text = json.dumps(state) if args.json else status.render(state)
            if args.watch is not None and not args.json and sys.stdout.isatty():
                text = "\033[H\033[2J" + text  # the terminal cleared: the state in place
            print(text, flush=True)
            if args.watch is None:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _load_or_demo(prog: str, args: argparse.Namespace) -> dict[str, Any]:
    """The --config file, or else the demo config, saying so: these commands read only the container
    and stage sections, and `make image` builds the image the demo config names."""
    if args.config is None:
        where = cfg.DEMO_CONFIG if cfg.DEMO_CONFIG.is_file() else "none: the schema's defaults"
        print(f"{prog}: no --config given, using the demo config ({where})", file=sys.stderr, flush=True)
        config = cfg.demo_config()
        for extra in args.overrides:
            cfg.deep_merge(config, cfg.read_yaml_mapping(extra))
        return validated(config)
    return checked_load(args.config, override_files=args.overrides)


def _config_options(args: argparse.Namespace) -> list[str]:
    options = ["--config", str(args.config)] if args.config else []
    for extra in args.overrides:
        options += ["--overrides", str(extra)]
    return options


# The subcommands that are not workflow steps: (help, main taking the rest of argv). Each parses its own
# options; `sim2dl --help` lists them with the steps.
TOOLS: dict[str, tuple[str, Any]] = {
    "launch": (
        "run a step on N ranks through the MPI launcher and the container runtime (launch --help)",
        launch_main,
    ),
    "image": (
        "build, push or pull the image, collect the host MPI, print the reference (image --help)",
        image_main,
    ),
    "doctor": ("check runtime, image, host MPI and node-local storage before a long job", doctor_main),
    "inspect": (
        "look at existing simulation output and write a starter config (inspect --help)",
        inspect_main,
    ),
    "status": (
        "where a workflow stands: steps, runs, records, training's progress (status WORKDIR [--watch])",
        status_main,
    ),
}


def _log_to_stderr() -> None:
    """sim2dl's own messages (loggers `pipeline.*`) go to stderr, as they come; stdout carries only each
    step's one-line JSON summary. Other libraries' loggers are left as they are."""
    logger = logging.getLogger("pipeline")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


ABORT_DELAY_S = 1.0


def run_step(args: argparse.Namespace, comm: Any) -> dict[str, Any] | int:
    """The step's own summary, or the exit code of an error it ended with: one message for an error every
    rank raised alike; an error or a bug on one rank of several ends the whole job."""
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        config = checked_load(args.config, override_files=args.overrides)
        return args.func(args, config, cfg.step_config(config, args.step), comm)
    except CollectiveError as e:
        # Every rank raised it after the same collective: one message, and a normal exit on all ranks.
        if rank == 0:
            where = f" (rank {e.rank})" if size > 1 and e.rank != 0 else ""
            print(f"sim2dl {args.step}: error{where}: {e}", file=sys.stderr, flush=True)
        return 2
    except Sim2dlError as e:
        print(f"sim2dl {args.step}: error: {e}", file=sys.stderr, flush=True)
        if size > 1:  # the other ranks may wait in a collective: end the whole job
            # after a moment: an abort at once (by this rank or another failing alike) could tear the
            # job down before mpiexec had passed the message on (seen: a stage error with empty stderr)
            time.sleep(ABORT_DELAY_S)
            comm.Abort(2)
        return 2
    except Exception:
        if size > 1:  # a bug on one rank must not leave the others waiting in a collective forever
            import traceback

            # the whole traceback in one write, and a moment for mpiexec to pass it on before the abort
            # tears the job down (seen: a step log ending at "Traceback (most recent call last):")
            sys.stderr.write(f"sim2dl {args.step}: rank {rank} of {size} failed:\n{traceback.format_exc()}")
            sys.stderr.flush()
            time.sleep(ABORT_DELAY_S)
            comm.Abort(1)
        raise


def provenance(peaks: list[float]) -> dict[str, Any]:
    """What ran the step: every rank's peak resident memory (MB) and the largest, the MPI library, the
    image `sim2dl launch` started it in, and the Slurm job and step."""
    out: dict[str, Any] = {"peak_rss_mb_per_rank": max(peaks), "peak_rss_mb_by_rank": peaks}
    out["mpi_library"] = mpi_library()
    if "SIM2DL_IMAGE" in os.environ:  # set by `sim2dl launch` in every container it starts
        out["image"] = os.environ["SIM2DL_IMAGE"]
    if "SLURM_JOB_ID" in os.environ:  # provenance: which batch job and srun step ran this
        out["slurm"] = {k.lower(): os.environ.get(f"SLURM_{k}") for k in ("JOB_ID", "STEP_ID", "NTASKS")}
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    join_streams_if_asked()  # a rank of `sim2dl launch` writing to one file: one stream, in order
    _log_to_stderr()
    if argv[:1] and argv[0] in TOOLS:
        return TOOLS[argv[0]][1](argv[1:])
    args = build_parser().parse_args(argv)
    comm = world()
    announce_started(comm)  # `sim2dl launch` learns that every rank got through MPI start-up
    start = time.perf_counter()
    summary = run_step(args, comm)
    if isinstance(summary, int):
        return summary
    # Every rank's peak resident memory, in MB (Linux reports ru_maxrss in KiB).
    peaks = [
        round(kib * 1024 / MB, 1)
        for kib in comm.allgather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    ]
    if comm.Get_rank() == 0:
        seconds = round(time.perf_counter() - start, 3)
        summary = {"step": args.step, "ranks": comm.Get_size(), "seconds": seconds, **summary}
        print(json.dumps({**summary, **provenance(peaks)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
