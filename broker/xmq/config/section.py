"""The base of every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every config section: unknown keys are refused, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
