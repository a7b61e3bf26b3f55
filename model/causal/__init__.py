"""Why a head attends where it does and what it changes: the lens, attribution, knockout and patching."""
