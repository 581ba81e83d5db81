"""The sum of two numbers (its bug: it subtracts)."""


def add(a: int, b: int) -> int:
    return a - b
