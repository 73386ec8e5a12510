"""Clients of a running server: `TritonRunner` over gRPC or HTTP (`triton.py`, `http.py`,
`data.py`, `errors.py`, `protocol.py`) and one request with decoding (`infer.py`)."""
