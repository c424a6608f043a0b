"""One run from its folder's lock to its report files: what the window's engine loop and headless
runs share, so that a run leaves the same log whichever drove it."""
