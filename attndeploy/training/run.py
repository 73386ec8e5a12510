"""One run of the training loop (`attndeploy.train.fit`): what its steps use and what it keeps.

`TrainingRun` holds the optimizer, its schedule and the weight average, the step count, the
training time (periodic evaluation excluded), the history of steps and of evaluations, GA-Net's
density weight as the controller steers it, and the selection of the best evaluation; it takes one
step at a time (`take_step`), evaluates the selection set (`record_evaluation`), says why the run
ends (`stop_reason`) and describes the run once it has (`summary`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from attndeploy.models import count_parameters
from attndeploy.training.averaging import WeightAverage
from attndeploy.training.config import TrainConfig
from attndeploy.training.density import DensityController, scheduled_target
from attndeploy.training.evaluation import batch_density, evaluate
from attndeploy.training.selection import BestTracker
from attndeploy.training.step import apply_update, step_loss


@dataclass
class TrainingRun:
    model: Any
    config: TrainConfig
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    steps_per_epoch: int
    horizon: int  # the most steps the run can take: the schedule ends there
    every: int  # evaluate the selection set every N steps; 0: at the end of each epoch
    select_set: Any  # what evaluation reads: the validation split, else the held-out set
    selecting: bool  # whether evaluations choose the weights kept or end the run (patience)
    tracker: BestTracker
    generator: torch.Generator  # shuffles the batches and drives word dropout
    density_weight: float  # GA-Net's λ now
    controller: DensityController | None = None  # steers λ towards the density target
    average: WeightAverage | None = None
    soft_table: torch.Tensor | None = None  # the teacher's logits, [N, C] (tagging: [N, W, C])
    taught: torch.Tensor | None = None  # [N] bool: the examples the teacher learnt from
    corrupt: Callable[[torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor] | None = None
    clean_gates: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    before_step: Callable[[int, int], None] | None = None
    step: int = 0
    paused: float = 0.0  # seconds spent in periodic evaluation, excluded from the training time
    status: str = ""  # the best evaluation so far, as the progress bar shows it
    history: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def epochs(self) -> float:
        """Epochs done: a fraction mid-epoch."""
        return self.step / self.steps_per_epoch

    def training_seconds(self) -> float:
        return time.perf_counter() - self.started - self.paused

    def take_step(self, train_set: Any, rows: torch.Tensor) -> dict[str, float]:
        """One optimizer step on the training examples `rows` ([B]); returns its history record
        (the task loss, the learning rate and for GA-Net the batch's gate densities)."""
        input_ids, attention_mask, labels = train_set.batch_at(rows)  # [B, t]
        if self.before_step is not None:
            self.before_step(self.step, self.horizon)
        clean_ids = input_ids
        if self.corrupt is not None:
            input_ids = self.corrupt(input_ids, attention_mask, self.generator)
        loss = step_loss(self.model, input_ids, attention_mask, labels, rows, self.config,
                         density_weight=self.density_weight, soft_table=self.soft_table,
                         taught=self.taught, head=train_set.head)
        learning_rate = apply_update(loss.total, self.model, self.optimizer, self.schedule,
                                     self.average)
        self.step += 1
        record = {"step": self.step, "loss": loss.task.item(), "learning_rate": learning_rate}
        if "density_penalty" in loss.out:
            record["soft_density"] = loss.out["density_penalty"].item()
            record["density"] = batch_density(loss.out["gates"], attention_mask)
            if self.controller is not None:
                self._steer_density(record, clean_ids, input_ids, attention_mask)
        self.history.append(record)
        return record

    def _steer_density(self, record: dict[str, float], clean_ids: torch.Tensor,
                       input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Record this step's λ, then let the controller set the next one from the batch's
        density (`clean_ids`: the batch before word dropout, `input_ids` after; [B, t])."""
        record["density_weight"] = self.density_weight
        goal = scheduled_target(self.config.density_target, self.epochs,
                                warmup=self.config.density_warmup,
                                anneal=self.config.density_anneal)
        # Steer what evaluation measures: the gates of the words themselves,
        # not of the <unk> that word dropout put in their place.
        clean = record["density"]
        if self.clean_gates is not None and clean_ids is not input_ids:
            clean = batch_density(self.clean_gates(clean_ids, attention_mask), attention_mask)
            record["clean_density"] = clean
        self.density_weight = 0.0 if goal is None else self.controller.update(clean, goal)

    def record_evaluation(self) -> None:
        """Evaluate the selection set (with the averaged weights when averaging) and offer the
        evaluation to selection; its time does not count as training time."""
        pause_start = time.perf_counter()
        with self.average.swapped_in() if self.average is not None else nullcontext():
            record = {"step": self.step, "epoch": round(self.epochs, 3),
                      "train_seconds": round(pause_start - self.started - self.paused, 3),
                      **evaluate(self.model, self.select_set)}
            if self.controller is not None:
                record["density_weight"] = self.density_weight
            self.evaluations.append(record)
            if self.selecting:
                self.tracker.offer(record, self.model)  # copies the weights evaluated
                best = self.tracker.best
                self.status = f"best {best[self.tracker.primary]:.3f}@ep {best['epoch']:.1f}"
        self.paused += time.perf_counter() - pause_start

    def stop_reason(self) -> str | None:
        """"time", "patience" or "steps" once the run should end; None while it goes on."""
        if self.config.max_seconds and self.training_seconds() >= self.config.max_seconds:
            return "time"
        if self.tracker.should_stop:
            return "patience"
        return "steps" if self.step >= self.horizon else None

    def summary(self, reason: str, seconds: float, metrics: dict[str, Any], *,
                best: dict[str, Any] | None, validated: bool,
                calibration: dict[str, Any] | None) -> dict[str, Any]:
        """What `TrainResult.summary` reports of the finished run: why it stopped after
        `seconds` of training, where the `best` evaluation kept was (`metrics`' best step),
        whether selection read a validation split (`validated`) and the gate calibration."""
        summary = {
            "config": asdict(self.config),
            "steps_done": self.step,
            "horizon_steps": self.horizon,
            "epochs_done": round(self.epochs, 3),
            "steps_per_epoch": self.steps_per_epoch,
            "stopped_by": reason,
            "selected_on": None if not self.selecting else "validation" if validated
            else "held_out",
            "evaluations": len(self.evaluations),
            "best_step": metrics["best_step"],
            "best_epoch": metrics["best_epoch"],
            "seconds": round(seconds, 3),
            "wall_seconds": round(time.perf_counter() - self.started, 3),
            "parameters": count_parameters(self.model),
            "final_loss": self.history[-1]["loss"] if self.history else None,
        }
        if best is not None and validated:
            summary[f"validation_{self.tracker.primary}"] = best[self.tracker.primary]
        if self.history and "soft_density" in self.history[-1]:
            summary["final_soft_density"] = self.history[-1]["soft_density"]
        if self.controller is not None:
            summary["final_density_weight"] = self.controller.weight
        if calibration is not None:
            summary["gate_calibration"] = calibration
        return summary
