"""geomkit: small plane geometry helpers."""

from geomkit.points import centroid, distance, lerp, nearest_point, rotate90, scale_points, snap_to_grid, translate
from geomkit.polygons import is_convex, on_segment, orientation, polygon_area, polygon_perimeter, segments_intersect
from geomkit.shapes import (
    bounding_box, circle_contains, clamp_point, rect_area, rect_contains, rect_intersection, rect_perimeter,
    rects_intersect,
)

__all__ = [
    "bounding_box", "centroid", "circle_contains", "clamp_point", "distance", "is_convex", "lerp",
    "nearest_point", "on_segment", "orientation", "polygon_area", "polygon_perimeter", "rect_area",
    "rect_contains", "rect_intersection", "rect_perimeter", "rects_intersect", "rotate90", "scale_points",
    "segments_intersect", "snap_to_grid", "translate",
]
