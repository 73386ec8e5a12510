"""Parts of the training loop (`attndeploy.train`) that stand on their own.

`baseline`: the bag-of-words naive Bayes every classification run is compared with;
`density`: GA-Net's density controller (the regulariser weight that steers the gate density to a
target); `selection`: evaluation-based model selection (best checkpoint, patience); `step`: one
step's loss and optimizer update; `run`: a run's bookkeeping (`TrainingRun`: steps, training time,
history, evaluations, GA-Net's λ).
"""
