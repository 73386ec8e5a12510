"""`attndeploy tune`: search serving configurations on the real local server, as Triton's model
analyzer does, and write the best one.

`run_tune(TuneOptions(repo=..., model=...))` measures the repository's configuration, the
package default and the candidates a coordinate search proposes (`search.py`), each in a scratch
copy of the repository (`scratch.py`) served by a fresh tritonserver and driven by the project's
load tester (`measure.py`), inside a time budget (`run.py`). It returns a `TuneResult`
(`result.py`: the Pareto front of throughput against p95, the chosen configuration, the package
default and in-process onnxruntime as references, the repeat of the chosen one), which
`report.write_plot` draws and `apply.apply_candidate` writes into the repository.

Modules: `space` (candidates and their dimensions), `target` (what is tuned: the model, the id
model a text model calls, an int8 file), `configs` (candidates to and from Triton configs),
`scratch`, `measure`, `in_process`, `search`, `options` (`TuneOptions`), `progress`, `run`,
`result`, `report`, `apply`.
"""

from __future__ import annotations

from attndeploy.serving.tune.apply import apply_candidate
from attndeploy.serving.tune.options import TuneOptions
from attndeploy.serving.tune.result import TuneResult
from attndeploy.serving.tune.run import run_tune
from attndeploy.serving.tune.space import Candidate, SearchSpace

__all__ = ["Candidate", "SearchSpace", "TuneOptions", "TuneResult", "apply_candidate",
           "run_tune"]
