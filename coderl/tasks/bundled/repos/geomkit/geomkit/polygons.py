"""Polygons (lists of vertices) and line segments."""

import math

from geomkit.points import Point


def orientation(a: Point, b: Point, c: Point, eps: float = 0.0) -> int:
    """Turn a -> b -> c: 1 counter-clockwise, -1 clockwise, 0 collinear (within ``eps``)."""
    if eps < 0:
        raise ValueError("eps must not be negative")
    cr = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    if cr > eps:
        return 1
    if cr < -eps:
        return -1
    return 0


def polygon_area(poly: list[Point], signed: bool = False) -> float:
    """Shoelace area; with ``signed`` it is positive for counter-clockwise vertex order."""
    n = len(poly)
    if n < 3:
        raise ValueError("a polygon needs at least 3 vertices")
    s = 0.0
    for i in range(n):
        x1, y1 = poly[i]
        x2, y2 = poly[(i + 1) % n]
        s += x1 * y2 - x2 * y1
    area = s / 2
    return area if signed else abs(area)


def polygon_perimeter(poly: list[Point], closed: bool = True) -> float:
    """Total edge length; the closing edge back to the first vertex is added when ``closed``."""
    n = len(poly)
    total = 0.0
    for i in range(n - 1):
        total += math.hypot(poly[i + 1][0] - poly[i][0], poly[i + 1][1] - poly[i][1])
    if closed and n > 2:
        total += math.hypot(poly[0][0] - poly[-1][0], poly[0][1] - poly[-1][1])
    return total


def is_convex(poly: list[Point]) -> bool:
    """Whether a simple polygon is convex (collinear vertices allowed, either winding)."""
    n = len(poly)
    if n < 3:
        return False
    sign = 0
    for i in range(n):
        a, b, c = poly[i], poly[(i + 1) % n], poly[(i + 2) % n]
        cr = (b[0] - a[0]) * (c[1] - b[1]) - (b[1] - a[1]) * (c[0] - b[0])
        if cr == 0:
            continue
        s = 1 if cr > 0 else -1
        if sign == 0:
            sign = s
        elif s != sign:
            return False
    return sign != 0


def on_segment(p: Point, a: Point, b: Point) -> bool:
    """Whether ``p`` lies on the segment a-b, endpoints included."""
    cr = (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])
    if cr != 0:
        return False
    if not min(a[0], b[0]) <= p[0] <= max(a[0], b[0]):
        return False
    return min(a[1], b[1]) <= p[1] <= max(a[1], b[1])


def segments_intersect(p1: Point, p2: Point, q1: Point, q2: Point) -> bool:
    """Whether segments p1-p2 and q1-q2 share a point (touching endpoints count)."""
    d1 = (p2[0] - p1[0]) * (q1[1] - p1[1]) - (p2[1] - p1[1]) * (q1[0] - p1[0])
    d2 = (p2[0] - p1[0]) * (q2[1] - p1[1]) - (p2[1] - p1[1]) * (q2[0] - p1[0])
    d3 = (q2[0] - q1[0]) * (p1[1] - q1[1]) - (q2[1] - q1[1]) * (p1[0] - q1[0])
    d4 = (q2[0] - q1[0]) * (p2[1] - q1[1]) - (q2[1] - q1[1]) * (p2[0] - q1[0])
    if d1 * d2 > 0 or d3 * d4 > 0:
        return False
    if d1 != 0 or d2 != 0:
        return True
    # All four points are collinear: the segments meet when their bounding boxes overlap.
    if max(p1[0], p2[0]) < min(q1[0], q2[0]) or max(q1[0], q2[0]) < min(p1[0], p2[0]):
        return False
    return max(p1[1], p2[1]) >= min(q1[1], q2[1]) and max(q1[1], q2[1]) >= min(p1[1], p2[1])
