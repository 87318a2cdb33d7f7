"""Server side: the round loop (FederatedModule), cohort sampling and cohort execution."""
