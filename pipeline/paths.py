"""paths: every file and directory name of the workflow, in one place.

Each step's output directory has a small class naming what is in it; the steps are given the directory
and name their files through it, and `Layout` (the workdir, for the Snakefile and the CLI's defaults)
is built from the same classes. A name is written once, here.

    {workdir}/raw/              simulate: sample files, simulate.json          RawPaths
    {workdir}/ingest/           parts/, manifest/, inputs.txt, rejects.csv,    IngestPaths
                                summary.json (last)
    {workdir}/convert/          parts/ (per-part about files), stats.json,     ConvertPaths
                                rejects.csv
    {workdir}/merged/           shards/ (+ .idx), provenance/, metadata.json   MergedPaths
    {workdir}/staged/           summary.json; node-local copies and their      StagedPaths
                                staged.json listing under stage.target
    {workdir}/search/           run/, trials/NAME/, best.yaml, search.png      SearchPaths
    {workdir}/train/            checkpoints/, model/, weights.npz, metrics.*, summary.json, TrainPaths
                                learning_curves.png, scores.png
    {workdir}/logs/STEP.log     each step's output, ending with its JSON summary
    {workdir}/report/           throughput.png

Memory and time: constant (names only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RawPaths:
    root: Path

    @property
    def summary(self) -> Path:
        return self.root / "simulate.json"

    @property
    def runs(self) -> Path:
        """An ensemble's runs table: the design (a row per run) and each run's outcome."""
        return self.root / "runs.parquet"

    @property
    def run_logs(self) -> Path:
        """Each ensemble run's stdout and stderr: logs/GROUP/RUN.log."""
        return self.root / "logs"

    @property
    def adaptive(self) -> AdaptivePaths:
        """An adaptive design's rounds (simulate.adaptive)."""
        return AdaptivePaths(self.root / "adaptive")

    def online_choices(self, digest: str) -> Path:
        """The runs the trainers chose online (simulate.adaptive with train.online), journaled per design."""
        return self.root / f"online_choices-{digest}.jsonl"


@dataclass(frozen=True)
class AdaptivePaths:
    """Per round: its design (written before any of its runs: the checkpoint a rerun resumes from), its runs
    with their outcomes, and the outputs of its runs that succeeded; the rounds' figures and the design and
    error figures."""

    root: Path

    def design(self, round_index: int) -> Path:
        return self.root / f"round-{round_index:03d}.design.parquet"

    def runs(self, round_index: int) -> Path:
        return self.root / f"round-{round_index:03d}.runs.parquet"

    def outputs(self, round_index: int) -> Path:
        return self.root / f"round-{round_index:03d}.outputs.npz"

    @property
    def network(self) -> Path:
        """acquisition surrogate_disagreement: its networks' weights after each round's training (the next
        round trains on from them; pipeline/design/network.py names the files)."""
        return self.root / "network"

    @property
    def rounds(self) -> Path:
        """A row per round: runs, validation error, the acquisition's statistics, seconds."""
        return self.root / "rounds.json"

    @property
    def tensorboard(self) -> Path:
        """The rounds' rows as TensorBoard scalars (step: the round)."""
        return self.root / "tensorboard"

    @property
    def design_figure(self) -> Path:
        return self.root / "design.png"

    @property
    def error_figure(self) -> Path:
        return self.root / "error.png"


@dataclass(frozen=True)
class IngestPaths:
    root: Path

    @property
    def parts(self) -> Path:
        """Packed records, one file per run of input files (pipeline.formats.parts)."""
        return self.root / "parts"

    @property
    def manifest(self) -> Path:
        """A directory of Parquet files, one per part (pipeline.data.tables)."""
        return self.root / "manifest"

    def manifest_piece(self, part_name: str) -> Path:
        return self.manifest / f"{part_name}.parquet"

    @property
    def inputs(self) -> Path:
        """The sorted listing of input files, one per line."""
        return self.root / "inputs.txt"

    @property
    def rejects(self) -> Path:
        return self.root / "rejects.csv"

    @property
    def summary(self) -> Path:
        """Written last: the counts; marks the step complete."""
        return self.root / "summary.json"

    @property
    def generations(self) -> Path:
        """What each ingest of a growing listing added (pipeline.steps.ingest.generations): not a
        declared output, so it outlives a rerun's removal of them."""
        return self.root / "generations.json"


@dataclass(frozen=True)
class ConvertPaths:
    root: Path

    @property
    def parts(self) -> Path:
        """Per part: what convert did to it (selection, transforms), read by merge."""
        return self.root / "parts"

    @property
    def stats(self) -> Path:
        return self.root / "stats.json"

    @property
    def rejects(self) -> Path:
        return self.root / "rejects.csv"


@dataclass(frozen=True)
class MergedPaths:
    root: Path

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    def shard(self, name: str) -> Path:
        """A shard by the name metadata.json gives it (with its split's directory when there are splits)."""
        return self.shards / name

    @property
    def plan_digest(self) -> Path:
        """The digest of the plan the shards were written for (a rerun with the same plan reuses them)."""
        return self.shards / "plan.digest"

    @property
    def provenance(self) -> Path:
        """A directory of Parquet files: shard, record, sample id and source of every record."""
        return self.root / "provenance"

    @property
    def metadata(self) -> Path:
        """Written last: the dataset as a whole (feature spec, encodings, counts, shards)."""
        return self.root / "metadata.json"

    @property
    def generations(self) -> Path:
        """What each merge of a growing set of parts added (pipeline.steps.merge.generations): not a
        declared output, so it outlives a rerun's removal of them."""
        return self.root / "generations.json"


STAGED_LISTING = "staged.json"  # in each node-local directory: the files staged there


@dataclass(frozen=True)
class StagedPaths:
    """A node-local staging directory."""

    root: Path

    @property
    def listing(self) -> Path:
        return self.root / STAGED_LISTING


@dataclass(frozen=True)
class TrainPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def model_levels(self) -> Path:
        """With simulate.fidelities: the saved model that takes the level too (train/model answers for the
        costliest; pipeline.training.levels)."""
        return self.root / "model_levels"

    @property
    def kept_weights(self) -> Path:
        """The kept model's variables (pipeline.training.checkpoints.save_model_weights): what
        train.warm_start starts a later run from."""
        return self.root / "weights.npz"

    def best_weights(self, at: int, unit: str = "epoch") -> Path:
        """The weights of the unit (epoch, online step) with the lowest validation loss so far (train.keep:
        best), beside the checkpoints: a resumed run keeps the best of those before it. Packed as every
        mode's kept weights are (pipeline.training.checkpoints.save_packed)."""
        return self.checkpoints / f"best-{unit}-{at:05d}.npy"

    @property
    def attempts(self) -> Path:
        """One line per start of training (restarts after a failure included)."""
        return self.root / "attempts.jsonl"

    @property
    def restaged(self) -> Path:
        """Written when training had to stage again (the job's ranks differ from stage's)."""
        return self.root / "restaged.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def tensorboard(self) -> Path:
        """TensorBoard's event files (train.tensorboard): a run directory per trainer under it."""
        return self.root / "tensorboard"

    @property
    def metrics_table(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def learning_curves(self) -> Path:
        return self.root / "learning_curves.png"

    @property
    def scores_figure(self) -> Path:
        """The task's figure of the kept model on the split it is scored on (test where there is one, else
        validation: summary.json's scored_on): predicted vs true, a confusion matrix, or masks."""
        return self.root / "scores.png"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"


@dataclass(frozen=True)
class SearchPaths:
    root: Path

    @property
    def run(self) -> Path:
        """The master's address and key, for workers that join."""
        return self.root / "run"

    def trial(self, name: str) -> Path:
        return self.root / "trials" / name

    @property
    def restaged(self) -> Path:
        return self.root / "restaged.json"

    @property
    def best(self) -> Path:
        """The best configuration, as overrides of the train section."""
        return self.root / "best.yaml"

    @property
    def plot(self) -> Path:
        return self.root / "search.png"


@dataclass(frozen=True)
class Layout:
    """Where each step reads and writes, below `workdir`. Shared by the Snakefile and the CLI."""

    workdir: Path

    def log(self, step: str) -> Path:
        """A step's output (progress, warnings, its JSON summary) when the workflow runs it."""
        return self.workdir / "logs" / f"{step}.log"

    @property
    def raw(self) -> Path:
        return self.workdir / "raw"

    @property
    def simulate_summary(self) -> Path:
        return RawPaths(self.raw).summary

    @property
    def design_figure(self) -> Path:
        """An adaptive design's runs coloured by round (simulate.adaptive)."""
        return RawPaths(self.raw).adaptive.design_figure

    @property
    def design_error_figure(self) -> Path:
        """An adaptive design's validation error against its runs."""
        return RawPaths(self.raw).adaptive.error_figure

    @property
    def ingest(self) -> Path:
        return self.workdir / "ingest"

    @property
    def manifest(self) -> Path:
        return IngestPaths(self.ingest).manifest

    @property
    def ingest_summary(self) -> Path:
        return IngestPaths(self.ingest).summary

    @property
    def ingest_rejects(self) -> Path:
        return IngestPaths(self.ingest).rejects

    @property
    def convert(self) -> Path:
        return self.workdir / "convert"

    @property
    def stats(self) -> Path:
        return ConvertPaths(self.convert).stats

    @property
    def convert_rejects(self) -> Path:
        return ConvertPaths(self.convert).rejects

    @property
    def merged(self) -> Path:
        return self.workdir / "merged"

    @property
    def metadata(self) -> Path:
        return MergedPaths(self.merged).metadata

    @property
    def provenance(self) -> Path:
        return MergedPaths(self.merged).provenance

    @property
    def stage_summary(self) -> Path:
        return self.workdir / "staged" / "summary.json"

    @property
    def search(self) -> Path:
        return self.workdir / "search"

    @property
    def search_best(self) -> Path:
        return SearchPaths(self.search).best

    @property
    def search_plot(self) -> Path:
        return SearchPaths(self.search).plot

    @property
    def train(self) -> Path:
        return self.workdir / "train"

    @property
    def train_summary(self) -> Path:
        return TrainPaths(self.train).summary

    @property
    def learning_curves(self) -> Path:
        return TrainPaths(self.train).learning_curves

    @property
    def scores_figure(self) -> Path:
        return TrainPaths(self.train).scores_figure

    @property
    def metrics(self) -> Path:
        return TrainPaths(self.train).metrics

    @property
    def throughput_plot(self) -> Path:
        return self.workdir / "report" / "throughput.png"
