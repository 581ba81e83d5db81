"""The repository's tests: exit status 0 when add.py adds."""

import unittest

from add import add


class TestAdd(unittest.TestCase):
    def test_small(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_negative(self) -> None:
        self.assertEqual(add(10, -4), 6)


if __name__ == "__main__":
    unittest.main()
