"""Model artifacts: the store entries of a classifier an open set spec trains.

One simulation stores its ``checkpoint`` (trained weights and input normalization), the
``outputs`` of every subset of its split, the ``ood_outputs`` of each extra OOD set and the
``kappa`` of each model-based detector (ODIN, MC dropout). The open set protocol plans them
per seed and scores from them; the severity protocol plans and reads them for its ``trained``
models. Protocols import this package, never each other.

Model outputs of every protocol (open set subsets, severity pools, ImageNet-O images) are
one store kind with one writer, :mod:`.outputs`.

The modules follow the flow: :mod:`.tasks` (the unit of work that fills entries, and how a
seed fails), :mod:`.outputs` (the outputs kind and its writer), :mod:`.keys` (the entries of a
seed and their keys), :mod:`.simulation` (split,
model, outputs on a worker), :mod:`.tuning` and :mod:`.kappa` (parameters chosen on
validation data, model-based κ), :mod:`.compute` (the engine's task of one simulation) and
:mod:`.verdicts` (the ``degenerate_verdict`` kind: verdicts of the degenerate rule that took
its permutation test, written where a seed is scored). Nothing here imports a protocol.
"""
