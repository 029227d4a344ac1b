"""Point and vector helpers. A point is an ``(x, y)`` tuple."""

import math

Point = tuple[float, float]


def distance(a: Point, b: Point, metric: str = "euclidean") -> float:
    """Distance between two points: 'euclidean', 'manhattan' or 'chebyshev'."""
    dx = abs(b[0] - a[0])
    dy = abs(b[1] - a[1])
    if metric == "euclidean":
        return math.hypot(dx, dy)
    if metric == "manhattan":
        return dx + dy
    if metric == "chebyshev":
        return max(dx, dy)
    raise ValueError(f"unknown metric: {metric!r}")


def nearest_point(p: Point, points: list[Point]) -> Point:
    """The point of ``points`` closest to ``p``; on a tie the earliest one wins."""
    if not points:
        raise ValueError("no points given")
    best = points[0]
    best_d2 = (best[0] - p[0]) ** 2 + (best[1] - p[1]) ** 2
    for q in points[1:]:
        d2 = (q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2
        if d2 < best_d2:
            best, best_d2 = q, d2
    return best


def lerp(a: Point, b: Point, t: float = 0.5, clamp: bool = False) -> Point:
    """Point at fraction ``t`` of the way from ``a`` to ``b`` (midpoint by default)."""
    if clamp:
        t = max(0.0, min(1.0, t))
    x = a[0] + (b[0] - a[0]) * t
    y = a[1] + (b[1] - a[1]) * t
    return (x, y)


def rotate90(p: Point, origin: Point = (0, 0), clockwise: bool = False) -> Point:
    """Rotate ``p`` a quarter turn about ``origin`` (counter-clockwise unless ``clockwise``)."""
    dx = p[0] - origin[0]
    dy = p[1] - origin[1]
    if clockwise:
        nx, ny = dy, -dx
    else:
        nx, ny = -dy, dx
    return (origin[0] + nx, origin[1] + ny)


def translate(points: list[Point], dx: float, dy: float = 0.0) -> list[Point]:
    """Shift every point by ``(dx, dy)``."""
    out: list[Point] = []
    for x, y in points:
        out.append((x + dx, y + dy))
    return out


def scale_points(points: list[Point], fx: float, fy: float | None = None, centre: Point = (0, 0)) -> list[Point]:
    """Scale points about ``centre`` by ``fx`` horizontally and ``fy`` (default ``fx``) vertically."""
    if fy is None:
        fy = fx
    cx, cy = centre
    out: list[Point] = []
    for x, y in points:
        out.append((cx + (x - cx) * fx, cy + (y - cy) * fy))
    return out


def snap_to_grid(p: Point, step: float = 1.0, origin: Point = (0, 0)) -> Point:
    """Round ``p`` to the nearest grid node; halves round up (towards +infinity)."""
    if step <= 0:
        raise ValueError("step must be positive")
    ox, oy = origin
    x = ox + math.floor((p[0] - ox) / step + 0.5) * step
    y = oy + math.floor((p[1] - oy) / step + 0.5) * step
    return (x, y)


def centroid(points: list[Point]) -> Point:
    """Mean of the points."""
    if not points:
        raise ValueError("centroid of no points")
    sx = sy = 0.0
    for x, y in points:
        sx += x
        sy += y
    n = len(points)
    return (sx / n, sy / n)
