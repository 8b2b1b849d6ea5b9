"""What /refund-demo's story needs of a chat platform: open a thread, post in it, read it back.

    story (demo/side_by_side.py) -> Stage.open_thread / post_line / post_frame ; questions <- Stage

Each platform's stage (demo/slack_stage.py, discord_stage.py, local_stage.py) builds on what its
adapter already holds, handed over through bot.commands.DemoStages: a frame is a Block Kit header
and sections in Slack, an embed in Discord, plain text in the terminal. `questions` reads the
agent's questions back from the platform, which owns what was posted: the story's counts are read
there, not kept beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agent.models import Actor, ThreadRef
from bot.commands import ChannelRef, DemoStage


@dataclass(frozen=True)
class Column:
    """One side of a side-by-side frame."""

    heading: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Frame:
    """One moment of the story, as the docs page shows it: a title in capitals, a few lines.

    Lines are written once in Slack's mrkdwn (`*bold*`, `_italic_`), as the commands' replies are;
    each platform renders them its own way. `columns` puts two sides next to each other.
    """

    title: str
    lines: tuple[str, ...] = ()
    columns: tuple[Column, ...] = field(default=())
    tone: str = "neutral"  # "gone" (red), "survives" (blue), "good" (green): a colour, if any

    @property
    def text(self) -> str:
        """The frame as plain lines: the fallback text, and the terminal's rendering."""
        body = list(self.lines)
        for column in self.columns:
            body += ["", f"*{column.heading}*", *(f"  {line}" for line in column.lines)]
        return "\n".join([f"== {self.title} ==", *body])


@runtime_checkable
class Stage(DemoStage, Protocol):
    """A chat platform as the two-thread demo uses it (and, as every DemoStage, its platform)."""

    async def open_thread(
        self, channel: ChannelRef, title: str, author: Actor, text: str
    ) -> tuple[ThreadRef, str]:
        """A new thread in `channel` whose root shows `title` and `author`'s `text`; returns the
        thread and the platform's id of the message carrying the text."""
        ...

    async def post_line(self, thread: ThreadRef, author: Actor, text: str) -> str:
        """`author`'s message in the thread (the demo customer's scripted answer); its id."""
        ...

    async def post_frame(self, where: ThreadRef | ChannelRef, frame: Frame) -> None:
        """A frame in a thread, or at the channel's top level (the summary)."""
        ...

    async def questions(self, thread: ThreadRef) -> list[str]:
        """The questions the agent posted in the thread, oldest first, as the platform has them."""
        ...


def story_stage(stage: DemoStage) -> Stage:
    """The stage a command handed over, as the story posts through it."""
    if not isinstance(stage, Stage):
        raise TypeError(f"{stage!r} is not a /refund-demo stage")
    return stage
