"""Figures a person would rather see than read: learning curves, each task's validation figure (predicted vs
true labels, a confusion matrix, segmentation masks), the search's
progress, a sweep's points, and the data steps' throughput. Each is one small PNG (memory and time
independent of the dataset's size: they plot per-epoch, per-trial or per-step figures)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.patches

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import numpy as np

from pipeline.storage.fsutil import atomic_path


def _save(fig: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def learning_curves(
    history: Sequence[Mapping[str, Any]], loss_name: str, path: Path, x: str = "epoch"
) -> None:
    """Training and validation loss, throughput and input wait per row of the history (x: the rows'
    axis: epoch offline, step online)."""
    epochs = [h[x] for h in history]
    fig, (ax_loss, ax_speed) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    ax_loss.plot(epochs, [h["loss"] for h in history], "o-", label="training")
    ax_loss.plot(epochs, [h["val_loss"] for h in history], "s-", label="validation")
    ax_loss.set(xlabel=x, ylabel=loss_name, title="Learning curves")
    ax_loss.legend()
    ax_speed.plot(epochs, [h["samples_per_s"] for h in history], "o-", color="tab:green")
    ax_speed.set(xlabel=x, ylabel="samples/s (all ranks)", title="Throughput")
    twin = ax_speed.twinx()
    twin.plot(epochs, [100 * h["input_wait_fraction"] for h in history], "x--", color="tab:red")
    twin.set_ylabel("% of step time waiting for input", color="tab:red")
    _save(fig, path)


def predicted_vs_true(
    predicted: np.ndarray,
    true: np.ndarray,
    names: Sequence[str],
    r2: Sequence[float],
    records: int,
    path: Path,
    baseline_r2: Sequence[float | None] = (),
) -> None:
    """One panel per label, in the labels' own units; R² is of the whole validation set, beside the classical
    baseline's where given."""
    n = len(names)
    # constrained layout keeps each panel's axis labels clear of its neighbours'
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4.0), squeeze=False, layout="constrained")
    for i, (ax, name) in enumerate(zip(axes[0], names, strict=True)):
        t, p = true[:, i], predicted[:, i]
        ax.scatter(t, p, s=8, alpha=0.6)
        if len(t):
            low, high = float(min(t.min(), p.min())), float(max(t.max(), p.max()))
            ax.plot([low, high], [low, high], "k--", lw=1)
        title = f"{name}: R² = {r2[i]:.2f}"
        if i < len(baseline_r2) and baseline_r2[i] is not None:
            title += f" (classical {baseline_r2[i]:.2f})"
        ax.set(xlabel=f"true {name}", ylabel=f"predicted {name}", title=title)
    shown = f"{len(true)} of {records}" if len(true) < records else f"{records}"
    fig.suptitle(f"Validation set ({shown} samples shown, labels in their own units)")
    _save(fig, path)


def surrogate_examples(
    true: Mapping[str, np.ndarray],
    predicted: Mapping[str, np.ndarray],
    scores: Mapping[str, float],
    baseline: Mapping[str, float],
    path: Path,
) -> None:
    """A row per example and output: a field's truth, prediction and difference side by side (one colour
    scale for truth and prediction), a vector's truth and prediction as lines; each output's NRMSE beside
    the emulator's in its column's title."""
    names = list(true)
    examples = len(next(iter(true.values()))) if names else 0
    columns = sum(3 if true[n].ndim >= 3 else 1 for n in names)
    fig, axes = plt.subplots(
        max(examples, 1),
        max(columns, 1),
        figsize=(2.6 * max(columns, 1), 2.4 * max(examples, 1)),
        squeeze=False,
        layout="constrained",
    )
    for row in range(examples):
        column = 0
        for name in names:
            t, p = true[name][row], predicted[name][row]
            score = f"NRMSE {scores.get(name) or float('nan'):.3f}"
            if baseline.get(name) is not None:
                score += f" (emulator {baseline[name]:.3f})"
            if t.ndim >= 2:
                t2, p2 = (
                    t.reshape(t.shape[0], t.shape[1], -1)[..., 0],
                    p.reshape(p.shape[0], p.shape[1], -1)[..., 0],
                )
                low, high = float(min(t2.min(), p2.min())), float(max(t2.max(), p2.max()))
                for k, (image, label) in enumerate(
                    [(t2, "true"), (p2, "predicted"), (p2 - t2, "difference")]
                ):
                    ax = axes[row, column + k]
                    limits = {"vmin": low, "vmax": high} if k < 2 else {"cmap": "RdBu_r"}
                    shown = ax.imshow(image, origin="lower", **limits)
                    fig.colorbar(shown, ax=ax, shrink=0.8)
                    ax.set_xticks([]), ax.set_yticks([])
                    if row == 0:
                        ax.set_title(f"{name}: {label}" + (f"\n{score}" if k == 0 else ""), fontsize=8)
                column += 3
            else:
                ax = axes[row, column]
                ax.plot(np.ravel(t), "k-", label="true")
                ax.plot(np.ravel(p), "C1--", label="predicted")
                if row == 0:
                    ax.set_title(f"{name}\n{score}", fontsize=8)
                    ax.legend(fontsize=7)
                column += 1
    fig.suptitle("Surrogate on held-out samples (their own units)")
    _save(fig, path)


def middle_plane(field: np.ndarray) -> np.ndarray:
    """A field's plane to draw: a 2-D field as it is, a cube's middle slice along its first axis."""
    while field.ndim > 2:
        field = field[field.shape[0] // 2]
    return field


def rollout_curves(rollout: Mapping[str, Any], name: str, path: Path) -> None:
    """An autoregressive rollout: NRMSE per step (the network's and persistence's), then truth, prediction
    and difference for the first test trajectory at a few steps (the first channel; a cube's middle plane)."""
    examples = rollout.get("examples") or {}
    shown = len(examples.get("steps", []))
    fig, axes = plt.subplots(
        1 + shown, 3, figsize=(10, 3.0 * (1 + shown)), squeeze=False, layout="constrained"
    )
    steps = np.arange(1, rollout["steps"] + 1)
    ax = axes[0, 0]
    fields = (rollout.get("by_field") or {}).get("nrmse_per_step") or {}
    mean = " (mean of the fields)" if len(fields) > 1 else ""
    ax.plot(steps, rollout["nrmse_per_step"], "o-", label="network" + mean)
    ax.plot(steps, rollout["persistence_nrmse_per_step"], "s--", label="persistence" + mean)
    ax.set(
        xlabel="step of the rollout",
        ylabel="NRMSE",
        title=f"{name}: rollout over {rollout['trajectories']} trajectories",
    )
    ax.legend(fontsize=8)
    if len(fields) > 1:  # each field apart: the network's and persistence's curves
        ax = axes[0, 1]
        persisted = rollout["by_field"]["persistence_nrmse_per_step"]
        for i, (field, curve) in enumerate(fields.items()):
            ax.plot(steps, curve, "o-", color=f"C{i}", label=f"{field}: network")
            ax.plot(steps, persisted[field], "s--", color=f"C{i}", alpha=0.6, label=f"{field}: persistence")
        ax.set(xlabel="step of the rollout", ylabel="NRMSE", title="per field")
        ax.legend(fontsize=7)
    for spare in axes[0, 1 + (len(fields) > 1) :]:
        spare.axis("off")
    for row in range(shown):
        t, p = middle_plane(examples["true"][row][..., 0]), middle_plane(examples["predicted"][row][..., 0])
        low, high = float(min(t.min(), p.min())), float(max(t.max(), p.max()))
        for k, (image, label) in enumerate([(t, "true"), (p, "predicted"), (p - t, "difference")]):
            ax = axes[1 + row, k]
            if image.ndim == 1:  # a state on a line: its values along it
                ax.plot(image, "k-" if k == 0 else "C1-" if k == 1 else "C3-")
                ax.set_ylim(*((low, high) if k < 2 else ax.get_ylim()))
            else:
                limits = {"vmin": low, "vmax": high} if k < 2 else {"cmap": "RdBu_r"}
                fig.colorbar(ax.imshow(image, origin="lower", **limits), ax=ax, shrink=0.8)
                ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(f"step {int(examples['steps'][row])}: {label}", fontsize=9)
    _save(fig, path)


def confusion_matrix(matrix: np.ndarray, classes: Sequence[str], title: str, path: Path) -> None:
    """Rows: true class, columns: predicted; colour is the share of the row (recall), text the count."""
    k = len(classes)
    side = min(12.0, 2.5 + 0.6 * k)
    fig, ax = plt.subplots(figsize=(side + 1.5, side), layout="constrained")
    share = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="share of the true class")
    ticks = np.arange(k)
    ax.set_xticks(ticks, classes, rotation=45, ha="right")
    ax.set_yticks(ticks, classes)
    ax.set(xlabel="predicted class", ylabel="true class", title=f"Validation: {title}")
    if k <= 20:
        for i in range(k):
            for j in range(k):
                color = "white" if share[i, j] > 0.5 else "black"
                ax.text(j, i, str(int(matrix[i, j])), ha="center", va="center", color=color, fontsize=8)
    _save(fig, path)


def segmentation_examples(
    examples: Mapping[str, np.ndarray], classes: Sequence[str], title: str, path: Path
) -> None:
    """A few validation samples: the feature's first channel, the true mask, the predicted mask."""
    n = len(examples["true"])
    fig, axes = plt.subplots(max(n, 1), 3, figsize=(9, 3 * max(n, 1)), squeeze=False, layout="constrained")
    cmap = plt.get_cmap("tab10", len(classes))
    for row in range(n):
        axes[row, 0].imshow(examples["feature"][row], cmap="viridis")
        for col, name in ((1, "true"), (2, "predicted")):
            axes[row, col].imshow(
                examples[name][row], cmap=cmap, vmin=-0.5, vmax=len(classes) - 0.5, interpolation="nearest"
            )
    for col, name in enumerate(("feature (channel 0)", "true mask", "predicted mask")):
        axes[0, col].set_title(name)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    handles = [matplotlib.patches.Patch(color=cmap(i), label=c) for i, c in enumerate(classes)]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(classes), 6))
    fig.suptitle(f"Validation: {title}")
    _save(fig, path)


def search_progress(runs: Sequence[Any], path: Path) -> None:
    """Loss against budget for every trial, and the best loss so far against compute spent."""
    fig, (ax_trials, ax_best) = plt.subplots(1, 2, figsize=(10, 3.8))
    by_config: dict[Any, list[Any]] = {}
    for r in runs:
        by_config.setdefault(r.config_id, []).append(r)
    for trials in by_config.values():
        trials.sort(key=lambda r: r.budget)
        ax_trials.plot([r.budget for r in trials], [r.loss for r in trials], "o-", alpha=0.6)
    ax_trials.set(xscale="log", xlabel="budget (epochs)", ylabel="validation loss", title="Every trial")
    ordered = sorted(runs, key=lambda r: r.time_stamps["finished"])
    spent = np.cumsum([r.budget for r in ordered])
    best = np.minimum.accumulate([r.loss for r in ordered])
    ax_best.step(spent, best, where="post")
    ax_best.set(
        xlabel="compute spent (epochs)", ylabel="best validation loss so far", title="Search progress"
    )
    _save(fig, path)


def sweep_comparison(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """One bar per sweep point: validation loss, and R² of each parameter."""
    names = [r["point"] for r in rows]
    r2_keys = [k for k in rows[0] if k.startswith("r2_")]
    fig, (ax_loss, ax_r2) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(rows) + 4), 4))
    x = np.arange(len(rows))
    ax_loss.bar(x, [r["val_loss"] for r in rows], color="tab:blue")
    ax_loss.set(ylabel="validation loss (MSE, normalised labels)", title="Validation loss per point")
    width = 0.8 / max(len(r2_keys), 1)
    for i, key in enumerate(r2_keys):
        ax_r2.bar(x + i * width - 0.4 + width / 2, [r[key] for r in rows], width, label=key[3:])
    ax_r2.set(ylabel="R² on the validation set", title="Recovered parameters per point")
    ax_r2.legend()
    for ax in (ax_loss, ax_r2):
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    _save(fig, path)


def data_throughput(
    summaries: Mapping[str, Mapping[str, Any]], records: int, shard_bytes: int, path: Path
) -> None:
    """Seconds per data step, and each step's rate: records/s, and MB/s where it moves the shards' bytes."""
    steps = [s for s in ("ingest", "convert", "merge", "stage") if s in summaries]
    seconds = [float(summaries[s]["seconds"]) for s in steps]
    fig, (ax_time, ax_rate) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax_time.bar(steps, seconds, color="tab:blue")
    ax_time.set(ylabel="seconds (wall, all ranks)", title=f"Data steps: {records:,} records")
    for i, step in enumerate(steps):
        ax_time.annotate(
            f"{summaries[step].get('ranks', '?')} ranks", (i, seconds[i]), ha="center", va="bottom"
        )
    x = np.arange(len(steps))
    ax_rate.bar(x - 0.2, [records / max(t, 1e-9) for t in seconds], 0.4, label="records/s", color="tab:green")
    ax_rate.set(ylabel="records/s", title="Throughput")
    ax_rate.set_xticks(x, steps)
    twin = ax_rate.twinx()
    rates = [shard_bytes / 1e6 / max(t, 1e-9) for t in seconds]
    moved = [rate if step in ("merge", "stage") else 0.0 for step, rate in zip(steps, rates, strict=True)]
    twin.bar(x + 0.2, moved, 0.4, label="MB/s of shards", color="tab:orange")
    twin.set_ylabel("MB/s of shards written (merge) or staged per node (stage)", color="tab:orange")
    _save(fig, path)


def population_curves(
    rounds: Sequence[Mapping[str, Any]], kept: Mapping[str, Any], loss_name: str, path: Path
) -> None:
    """train.population: each trainer's validation loss over rounds (the common split), a marker where a
    trainer adopted another's model (its number beside it), the kept model ringed; beside it, each
    trainer's learning rate where the population mutates it, else its training loss."""
    trainers = len(rounds[0]["val_loss"]) if rounds else 0
    x = [r["round"] for r in rounds]
    fig, (ax_val, ax_side) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    mutated = bool(rounds) and "learning_rate" in rounds[0]["hyperparameters"][0]
    for t in range(trainers):
        line = ax_val.plot(x, [r["val_loss"][t] for r in rounds], "o-", ms=3, label=f"trainer {t}")[0]
        for r in rounds:
            source = r["adopted"][t]
            if source is not None:
                ax_val.plot(r["round"], r["val_loss"][t], "*", ms=11, color=line.get_color())
                ax_val.annotate(
                    f"←{source}",
                    (r["round"], r["val_loss"][t]),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        side = (
            [r["hyperparameters"][t]["learning_rate"] for r in rounds]
            if mutated
            else [r["train_loss"][t] for r in rounds]
        )
        ax_side.plot(x, side, "o-", ms=3, color=line.get_color())
    if kept:
        ax_val.plot(kept["round"], kept["val_loss"], "o", ms=14, mfc="none", mec="k", label="kept")
    ax_val.set(xlabel="round", ylabel=f"validation {loss_name}", title="Population (★ adopted ←from)")
    ax_val.legend(fontsize=7)
    if mutated:
        ax_side.set(xlabel="round", ylabel="learning rate", yscale="log", title="Hyperparameters")
    else:
        ax_side.set(xlabel="round", ylabel=f"training {loss_name}", title="Training loss")
    _save(fig, path)


def adaptive_figures(
    runs: Any, names: Sequence[str], rounds: Sequence[Mapping[str, Any]], design_path: Path, error_path: Path
) -> None:
    """An adaptive design (pipeline/design/loop/rounds.py): its runs over the first two parameters,
    coloured by round, failed runs as crosses; and the emulator's validation error against the number of
    runs it was fitted on (each adaptive round's fit)."""
    table = runs.to_pydict()
    x = np.asarray(table[names[0]], float)
    y = np.asarray(table[names[1]], float) if len(names) > 1 else np.zeros(len(x))
    rounds_of = np.asarray(table["round"])
    ok = np.array([s == "ok" for s in table["status"]])
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    shown = ax.scatter(
        x[ok], y[ok], c=rounds_of[ok], cmap="viridis", s=18, vmin=0, vmax=max(1, rounds_of.max())
    )
    title = f"{len(x)} runs, chosen in {int(rounds_of.max()) + 1} rounds"
    if "fidelity_index" in table:  # levels of one simulator: the costliest level's runs ringed
        level = np.asarray(table["fidelity_index"])
        top = ok & (level == level.max())
        ax.scatter(x[top], y[top], facecolors="none", edgecolors="black", s=60, label="the costliest level")
        title += f", {int(top.sum())} by the costliest level"
    if (~ok).any():
        ax.scatter(x[~ok], y[~ok], c="red", marker="x", s=30, label="failed (never proposed again)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    fig.colorbar(shown, ax=ax, label="round (0: the space-filling start)")
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1] if len(names) > 1 else "")
    ax.set_title(title)
    _save(fig, design_path)
    fitted = [r for r in rounds if "validation_nrmse_mean" in r]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    spent = all("fitted_cost" in r for r in fitted)  # levels: the cost fitted on, in costliest runs
    if fitted:
        counts = [r["fitted_cost"] if spent else r["fitted_on"] for r in fitted]
        ax.plot(
            counts, [r["validation_nrmse_mean"] for r in fitted], "o-", label="leave-one-out NRMSE (mean)"
        )
        ax.set_yscale("log")
        ax.legend()
    ax.set_xlabel(
        "cost of the runs fitted on (runs of the costliest level)"
        if fitted and spent
        else "runs the emulator was fitted on"
    )
    ax.set_ylabel("validation NRMSE" + (" (the costliest level's runs)" if fitted and spent else ""))
    ax.set_title("the emulator's error as the design grows")
    _save(fig, error_path)
