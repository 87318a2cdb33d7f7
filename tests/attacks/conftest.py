"""The attack tests train small federated runs: one intra-op thread keeps them fast on a
shared machine (thread oversubscription made them ~10× slower)."""

import torch

torch.set_num_threads(1)
