"""Shape bucketing: which input dimensions vary, which buckets to pad them to, and what that saves."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BucketSuggestion", "suggest_buckets", "power_of_two_buckets", "next_power_of_two", "bucket_for",
           "predict_compilations"]


def next_power_of_two(size: int) -> int:
    """The smallest power of two >= size: the bucket ladder of `torchport.compile(buckets="auto")`."""
    bucket = 1
    while bucket < size:
        bucket *= 2
    return bucket


def bucket_for(size: int, buckets: list[int] | None) -> int:
    """The bucket `size` pads to: the first of `buckets` that holds it, the size itself when none
    does, or the next power of two when no list is given."""
    if buckets is None:
        return next_power_of_two(size)
    for bucket in sorted(buckets):
        if size <= bucket:
            return bucket
    return size


def power_of_two_buckets(sizes: list[int]) -> list[int]:
    """Powers of two covering `sizes`, the largest capped at max(sizes) (never pad past the longest)."""
    largest = max(sizes)
    return sorted({min(next_power_of_two(size), largest) for size in sizes})


def predict_compilations(shapes: list[dict[tuple, tuple]]) -> dict:
    """Compilations a static-shape compiler runs for these input shapes: one per distinct shape
    without buckets, and with the power-of-two buckets `torchport.compile` pads varying dimensions to."""
    if not shapes:
        return {"without_buckets": 0, "with_buckets": 0, "varying_dimensions": []}
    varying = sorted({(path, dimension) for shape in shapes for path, dims in shape.items()
                      for dimension in range(len(dims))
                      if len({other[path][dimension] for other in shapes
                              if path in other and len(other[path]) == len(dims)}) > 1})
    bucketed = set()
    for shape in shapes:
        bucketed.add(tuple(sorted(
            (path, tuple(bucket_for(size, None) if (path, dimension) in varying else size
                         for dimension, size in enumerate(dims)))
            for path, dims in shape.items()
        )))
    return {
        "without_buckets": len({tuple(sorted(shape.items())) for shape in shapes}),
        "with_buckets": len(bucketed),
        "varying_dimensions": [{"input": "/".join(str(part) for part in path) or "input", "dimension": dimension}
                               for path, dimension in varying],
    }


@dataclass
class BucketSuggestion:
    """Pad each varying dimension up to the next bucket: one compilation per bucket, not per size."""

    #: (input path, dimension index) -> bucket sizes
    dimensions: dict[tuple, list[int]]
    observed: dict[tuple, list[int]]
    graphs_before: int
    graphs_after: int
    padding_overhead: float
    verified_graphs: int | None = None
    notes: list[str] = field(default_factory=list)

    def bucket_of(self, key: tuple, size: int) -> int:
        """The bucket a size pads to."""
        return bucket_for(size, self.dimensions[key])

    def to_dict(self) -> dict:
        """Plain data for reports."""
        return {
            "dimensions": [
                {"input": "/".join(str(part) for part in key[0]) or "input", "dimension": key[1],
                 "observed_sizes": self.observed[key], "buckets": buckets}
                for key, buckets in self.dimensions.items()
            ],
            "distinct_shapes_before": self.graphs_before,
            "distinct_shapes_after": self.graphs_after,
            "padding_overhead": round(self.padding_overhead, 4),
            "verified_compilations_after": self.verified_graphs,
        }


def suggest_buckets(shapes: list[dict[tuple, tuple]]) -> BucketSuggestion | None:
    """A bucketing for the samples' input shapes, or None when no dimension varies."""
    if len(shapes) < 2:
        return None
    varying: dict[tuple, list[int]] = {}
    for path in shapes[0]:
        rank = len(shapes[0][path])
        for dimension in range(rank):
            sizes = [shape[path][dimension] for shape in shapes if path in shape and len(shape[path]) == rank]
            if len(set(sizes)) > 1:
                varying[(path, dimension)] = sizes
    if not varying:
        return None
    dimensions = {key: power_of_two_buckets(sizes) for key, sizes in varying.items()}
    before = len({tuple(sorted(shape.items())) for shape in shapes})
    suggestion = BucketSuggestion(dimensions, {key: sorted(set(sizes)) for key, sizes in varying.items()}, before, 0, 0.0)
    bucketed = set()
    real = 0
    padded = 0
    for shape in shapes:
        key_sizes = []
        for key in dimensions:
            size = shape[key[0]][key[1]]
            bucket = suggestion.bucket_of(key, size)
            key_sizes.append(bucket)
            real += size
            padded += bucket
        others = tuple(sorted((path, value) for path, value in shape.items()))
        bucketed.add((tuple(key_sizes), tuple((path, tuple(size for index, size in enumerate(value)
                                                           if (path, index) not in dimensions))
                                              for path, value in others)))
    suggestion.graphs_after = len(bucketed)
    suggestion.padding_overhead = (padded - real) / real if real else 0.0
    return suggestion
