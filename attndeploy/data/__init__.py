"""Data: a word tokenizer, a right-padded dataset, synthetic tasks and JSONL files."""

from attndeploy.data.dataset import IGNORE_INDEX, TextDataset
from attndeploy.data.jsonl import load_jsonl, read_jsonl
from attndeploy.data.synthetic import (
    TASKS,
    TaskSpec,
    example_texts,
    get_task,
    register_task,
    task_names,
)
from attndeploy.data.tokenizer import WordTokenizer

__all__ = [
    "IGNORE_INDEX",
    "TASKS",
    "TaskSpec",
    "TextDataset",
    "WordTokenizer",
    "example_texts",
    "get_task",
    "load_jsonl",
    "read_jsonl",
    "register_task",
    "task_names",
]
