"""Shared by the rank-parallel pytest files: every rank runs the same tests in the same order."""

import os

import pytest


@pytest.fixture(scope="session")
def world():
    r = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
    n = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    return r, n
