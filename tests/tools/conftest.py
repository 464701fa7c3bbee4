"""The tools are scripts run from tools/, where they import their shared helpers
(`tool_cli`); tests load them by path, so tools/ goes on the import path."""

import os
import sys

TOOLS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tools")
if TOOLS_DIR not in sys.path:
    sys.path.insert(0, TOOLS_DIR)
