"""The results store's series with their change points, as the HTML
report draws them."""
from ltb.base import require
from ltb.history.changes import changes
from ltb.history.store import Store


def store_series(db):
    """The store's series with their change points, for the HTML page."""
    require("ruptures", "scipy", "numpy")
    out = []
    with Store(db or None, create=False) as store:
        for (fp, name), points in sorted(store.series().items()):
            commits = [p.commit for p in points]
            values = [p.value for p in points]
            out.append({"name": name, "fingerprint": fp, "commits": commits, "values": values,
                        "changes": changes(values, 0.02, 0.95, commits)})
    return out
