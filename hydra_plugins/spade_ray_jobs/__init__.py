"""Hydra plugins of spade-ray (discovered in the hydra_plugins namespace package)."""
