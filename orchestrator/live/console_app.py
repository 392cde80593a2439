"""``gameday console``: a team's screen in a live game day.

A full-screen prompt_toolkit application: the status (``console_view.render_status``)
at the top, refreshed from a background poll of ``state``; below it a scrolling feed
that also shows the answers to commands; the input line at the bottom. When stdin or
stdout is not a terminal, a line mode prints the status once and runs commands read
line by line, so the console can be scripted.
"""
from __future__ import annotations

import asyncio
import sys
import threading

from orchestrator.live.console_view import (HELP, completion_words, parse_command, render_act_result, render_catalogue,
                                            render_feed_entry, render_note_result, render_status)
from orchestrator.live.client import RequestFailed, ServerUnreachable
from orchestrator.live.protocol import for_terminal

POLL_S = 0.5  # the server's rate limit allows a console far more than this


class Console:
    """What the console knows and does, apart from any screen. All server calls go
    through one lock: a ZeroMQ socket must not be used by two threads at once."""

    def __init__(self, client, team: str, who: str):
        self.client, self.team, self.who = client, team, who
        self.lock = threading.Lock()
        self.state: dict | None = None
        self.next = 0  # the feed index to ask from; kept across reconnects so nothing is missed
        self.disconnected = False

    def call(self, op: str, args: dict, retries: int | None = None):
        with self.lock:
            return self.client.call(op, args, retries=retries)

    @property
    def catalogue(self) -> list[dict]:
        return (self.state or {}).get("catalogue") or []

    def refresh(self, retries: int | None = 0) -> list[dict]:
        """Fetch the state; returns the feed entries not seen before. One try by default:
        the poller tries again itself, and shows the disconnection meanwhile."""
        try:
            st = self.call("state", {"since": self.next}, retries)
        except ServerUnreachable:
            self.disconnected = True
            raise
        self.disconnected = False
        new = [e for e in st.get("feed") or [] if e.get("n", self.next) >= self.next]
        self.next = max(self.next, int(st.get("feed_next", self.next)))
        self.state = st
        return new

    def execute(self, line: str) -> tuple[list[str], bool]:
        """Run a typed line: (text to show, whether to quit)."""
        try:
            op, args = parse_command(line, self.catalogue)
        except ValueError as e:
            hint = "" if self.catalogue else " (the console has not reached the server yet, so it knows no actions)"
            return [f"{e}{hint}"], False
        if op == "quit":
            return [], True
        if op == "help":
            return [HELP], False
        if op == "catalogue":
            return [render_catalogue(self.catalogue)], False
        if self.who:
            args["by"] = self.who
        try:
            result = self.call(op, args)
            return [render_note_result(result) if op == "note" else render_act_result(result)], False
        except RequestFailed as e:
            return [f"refused: {e}"], False
        except ServerUnreachable:
            self.disconnected = True
            return ["disconnected, retrying: no answer, so the request may not have arrived; "
                    "check the actions above before asking again"], False


def run_console(client, team: str, who: str) -> None:
    console = Console(client, team, who)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        run_lines(console, sys.stdin, sys.stdout)
        return
    try:
        ConsoleApp(console).run()
    except KeyboardInterrupt:  # a SIGINT from outside; Ctrl-C typed in the app is a key
        pass


def run_lines(console: Console, inp, out) -> None:
    try:
        console.refresh(retries=None)
    except ServerUnreachable:
        pass  # the header says so
    except RequestFailed as e:
        print(for_terminal(f"refused: {e}", lines=True), file=sys.stderr)
    print(for_terminal(render_status(console.state, console.disconnected), lines=True), file=out, flush=True)
    try:
        for raw in inp:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            lines, leave = console.execute(line)
            for text in lines:
                print(for_terminal(text, lines=True), file=out, flush=True)
            if leave:
                break
    except KeyboardInterrupt:
        pass


class ConsoleApp:
    def __init__(self, console: Console):
        from prompt_toolkit.application import Application
        from prompt_toolkit.completion import DynamicCompleter, WordCompleter
        from prompt_toolkit.history import InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings
        from prompt_toolkit.layout import FloatContainer, Float, HSplit, Layout, Window
        from prompt_toolkit.layout.controls import FormattedTextControl
        from prompt_toolkit.layout.menus import CompletionsMenu
        from prompt_toolkit.styles import Style
        from prompt_toolkit.widgets import TextArea

        self.c = console
        self.last_error = None
        self.wake: asyncio.Event | None = None
        self.feed = TextArea(read_only=True, focusable=False, scrollbar=True, wrap_lines=True)
        self.input = TextArea(
            height=1, multiline=False, prompt=f"{console.team}> ", history=InMemoryHistory(),
            completer=DynamicCompleter(lambda: WordCompleter(completion_words(self.c.catalogue))),
            complete_while_typing=False, accept_handler=self._accept)
        body = HSplit([
            Window(FormattedTextControl(self._status_fragments), height=self._status_height, wrap_lines=False),
            Window(height=1, char="─", style="class:sep"),
            self.feed,
            Window(FormattedTextControl("Tab completes · Up/Down history · PageUp/PageDown scroll the feed · "
                                        "Ctrl-L redraws · `help` · `quit` or Ctrl-D leaves"),
                   height=1, style="class:hint"),
            self.input,
        ])
        root = FloatContainer(body, floats=[Float(xcursor=True, ycursor=True,
                                                  content=CompletionsMenu(max_height=8, scroll_offset=1))])
        kb = KeyBindings()

        @kb.add("c-c")
        @kb.add("c-d")
        def _leave(event):
            self.leave()

        @kb.add("c-l")
        def _redraw(event):
            event.app.renderer.clear()

        kb.add("pageup")(lambda event: self._page(-1))
        kb.add("pagedown")(lambda event: self._page(1))
        style = Style.from_dict({"header": "reverse bold", "header.bad": "bg:ansired fg:ansiwhite bold",
                                 "alert": "ansired bold", "stale": "ansiyellow", "message": "ansicyan bold",
                                 "sep": "ansibrightblack", "hint": "reverse"})
        self.app = Application(layout=Layout(root, focused_element=self.input), key_bindings=kb, style=style,
                               full_screen=True)

    def leave(self) -> None:
        if self.app.future is not None and not self.app.future.done():  # once: a second exit() raises
            self.app.exit()

    # -- the status pane ------------------------------------------------------------------------------
    def _status_text(self) -> str:
        return for_terminal(render_status(self.c.state, self.c.disconnected, self.app.output.get_size().columns), lines=True)

    def _status_height(self):
        from prompt_toolkit.layout import Dimension

        lines = self._status_text().count("\n") + 1
        return Dimension.exact(max(1, min(lines, self.app.output.get_size().rows - 8)))  # the feed keeps some rows

    def _status_fragments(self):
        frags = []
        for i, line in enumerate(self._status_text().split("\n")):
            if i == 0:
                style = "class:header.bad" if self.c.disconnected else "class:header"
            elif line.startswith("ALERTS") and not line.endswith("none"):
                style = "class:alert"
            elif "NO DATA" in line or " stale " in line:
                style = "class:stale"
            elif line.startswith("FACILITATOR"):
                style = "class:message"
            else:
                style = ""
            frags += [(style, line), ("", "\n")]
        return frags[:-1]

    # -- the feed pane --------------------------------------------------------------------------------
    def say(self, *texts: str) -> None:
        """Append to the feed; stay at the bottom unless the user scrolled up."""
        from prompt_toolkit.document import Document

        if not texts:
            return
        buf = self.feed.buffer
        follow = buf.cursor_position >= len(buf.text)
        added = "\n".join(for_terminal(t, lines=True) for t in texts)
        text = f"{buf.text}\n{added}" if buf.text else added
        buf.set_document(Document(text, len(text) if follow else buf.cursor_position), bypass_readonly=True)

    def _page(self, direction: int) -> None:
        info = self.feed.window.render_info
        if info is None:
            return
        buf, h = self.feed.buffer, max(1, info.window_height - 1)
        if direction < 0:
            row = max(0, info.first_visible_line() - h)
        else:
            row = info.last_visible_line() + h
        doc = buf.document
        if row >= doc.line_count - 1:
            buf.cursor_position = len(buf.text)  # back at the bottom: follow new entries again
        else:
            buf.cursor_position = doc.translate_row_col_to_index(row, 0)

    # -- commands and polling -------------------------------------------------------------------------
    def _accept(self, buf) -> bool:
        line = buf.text.strip()
        if line:
            self.app.create_background_task(self._run(line))
        return False  # clear the input line

    async def _run(self, line: str) -> None:
        self.say(f"{self.c.team}> {line}")
        lines, leave = await asyncio.get_running_loop().run_in_executor(None, self.c.execute, line)
        if leave:
            self.leave()
            return
        self.say(*lines)
        if self.wake is not None:
            self.wake.set()  # show the action's progress at once

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                new = await loop.run_in_executor(None, self.c.refresh)
                self.last_error = None
            except ServerUnreachable:
                new = []
            except RequestFailed as e:
                new = []
                if str(e) != self.last_error:  # say it once, not twice a second
                    self.last_error = str(e)
                    self.say(f"the server refused the state request: {e}")
            self.say(*(render_feed_entry(e) for e in new))
            self.app.invalidate()
            try:
                await asyncio.wait_for(self.wake.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()

    def run(self) -> None:
        try:
            new = self.c.refresh()
        except (ServerUnreachable, RequestFailed):
            new = []
        self.say(*(render_feed_entry(e) for e in new))
        self.say("type `help` for the commands, `catalogue` for the mitigations")

        async def main():
            self.wake = asyncio.Event()
            poller = asyncio.ensure_future(self._poll())
            try:
                await self.app.run_async()
            finally:
                poller.cancel()

        # asyncio.run waits for the executor, so no call is in flight when the caller closes the client
        asyncio.run(main())
