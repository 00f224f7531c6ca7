"""The embedding model: its builds and files, the tokenizer, the ONNX sessions, the embedder."""
