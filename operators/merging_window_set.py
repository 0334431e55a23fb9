"""Flink's ``MergingWindowSet``: the in-flight windows of one key of a merging assigner
(sessions), each mapped to the state window that holds its contents.

Not thread-safe (the task thread only); the mapping is the live dict stored in the
keyed state backend, so it is snapshotted with the key.
"""

from __future__ import annotations

from typing import Any, Callable, List


class MergingWindowSet:
    """Flink's ``MergingWindowSet``: the in-flight windows of one key, each mapped to the
    *state window* whose namespace holds its contents (merging never moves contents
    except into the state window of the merge result). ``mapping`` is the live dict
    stored in the keyed state table."""

    def __init__(self, assigner: Any, mapping: dict) -> None:
        self.assigner = assigner
        self.mapping = mapping

    def get_state_window(self, window: Any) -> Any:
        return self.mapping.get(window)

    def retire_window(self, window: Any) -> None:
        if self.mapping.pop(window, None) is None:
            raise RuntimeError(f"Window {window!r} is not in in-flight window set.")

    def add_window(self, new_window: Any, merge_function: Callable[[Any, List[Any], Any, List[Any]], None]) -> Any:
        """Add ``new_window``, merging as the assigner says; returns the window it ended in."""
        mapping = self.mapping
        merge_results: List[tuple] = []
        self.assigner.merge_windows(
            list(mapping) + [new_window], lambda to_merge, result: merge_results.append((result, list(to_merge)))
        )
        result_window = new_window
        merged_new_window = False
        for merge_result, merged_windows in merge_results:
            if new_window in merged_windows:
                merged_windows.remove(new_window)
                merged_new_window = True
                result_window = merge_result
            # the state window of the first merged window keeps the contents of all of them
            merged_state_window = mapping[merged_windows[0]]
            merged_state_windows = [mapping.pop(w) for w in merged_windows if w in mapping]
            mapping[merge_result] = merged_state_window
            merged_state_windows.remove(merged_state_window)
            # a pre-existing window merged only with the new window it contains: nothing moves
            if not (len(merged_windows) == 1 and merged_windows[0] == merge_result):
                merge_function(merge_result, merged_windows, merged_state_window, merged_state_windows)
        if not merge_results or (result_window == new_window and not merged_new_window):
            mapping[result_window] = result_window
        return result_window

    def __repr__(self) -> str:
        return f"MergingWindowSet({self.mapping!r})"


__all__ = ["MergingWindowSet"]
