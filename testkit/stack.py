"""What the training side never loads: the tokenizer stack and the server's packages (the client's tests and the
data tools' check the modules a fresh process ends with against it)."""

#: Top-level modules a process using only the client (and the data tools) must never import.
FORBIDDEN = (
    "tokenizers",
    "transformers",
    "fastapi",
    "pydantic",
    "pydantic_core",
    "starlette",
    "uvicorn",
    "sentencepiece",
    "prometheus_client",
)
