"""The fault suite shares the training tests' root fixture (a tiny tokenized corpus)."""

from tests.train.conftest import shared_root  # noqa: F401
