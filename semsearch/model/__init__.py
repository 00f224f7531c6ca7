"""The embedding model: its builds and files, the tokenizer, the ONNX sessions, the embedder."""

import os

# onnxruntime 1.32's Linux build keeps telemetry: a device id and an event store under
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime, queued for upload, and a warning on every
# model load where it cannot write them (a read-only home, as in a sandboxed container). Its
# full opt-out is this variable, read once, before onnxruntime starts: every import of it in
# semsearch comes through this package. A user who sets the variable keeps their choice.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
