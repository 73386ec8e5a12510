"""Serving: run a local Triton Inference Server on a model repository (`server`)."""
