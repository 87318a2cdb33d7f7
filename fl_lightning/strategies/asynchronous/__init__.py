"""Asynchronous federated learning: the simulated clock, the buffer of late uploads and the
base strategy that runs them (FedBuff, FedAsync, the async local-DP strategies and ADP-FL build
on it). Only strategies use these, so they live here, not in ``server/`` (review P2)."""
