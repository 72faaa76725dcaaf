"""`autotune report`'s parts: the views read from the database (`data`), the figures (`svg`) and the page
(`page`)."""

from autotune.cli.reporting.data import GpuView, VerifyView, gpu_views, read_verify
from autotune.cli.reporting.page import render

__all__ = ["GpuView", "VerifyView", "gpu_views", "read_verify", "render"]
