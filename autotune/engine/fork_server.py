"""What the compile pool's fork server imports first, before the heavy modules it preloads: it asks to die
with the sweep that started it (`autotune.engine.lifeline.parent_from_env`), so a sweep killed while its
server still imports torch leaves nothing behind."""

from __future__ import annotations

from autotune.engine.lifeline import parent_from_env

parent_from_env()
