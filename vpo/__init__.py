"""VPO reproduction pipeline: the engine (estimators, weights, metrics, tasks, rewards, trainers).

Importing `vpo` needs only numpy and scipy; veRL, vLLM, transformers and torch are imported
inside the functions that use them.
"""

__version__ = "0.1.0"
