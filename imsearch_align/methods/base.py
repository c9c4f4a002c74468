"""Shared estimator plumbing for the alignment methods.

Every method is a scikit-learn style estimator (see ``docs/architecture.md``):

* ``__init__`` stores its parameters and nothing else;
* ``fit(image_emb, text_emb)`` validates the paired support set, learns
  state whose names end in ``_`` and returns ``self``;
* ``transform_images`` / ``transform_texts`` map each modality into a space
  where the method's own similarity is an inner product;
* ``similarity(X, Y)`` computes that score directly from the published
  definition, so ``transform_images(X) @ transform_texts(Y).T`` can be
  checked against it.

Subclasses implement ``_fit``, ``_transform_images``, ``_transform_texts``
and ``_similarity`` on validated arrays; this module does the validation,
the fitted checks and the dimension checks once. ``_fit`` gets float64
arrays, unless the method sets ``fit_float64 = False``: then it gets the
input's float dtype as it came (no copy) and computes what it needs in
float64 block by block (:func:`support_moments`), so fitting on 29,000
pairs of 768-d vectors does not hold a float64 copy of them. Likewise
``transform_float64 = False`` hands the transforms float32 input as it came.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
from sklearn.exceptions import NotFittedError

from imsearch_align.framework.validation import check_matrix

__all__ = ["AlignmentBase", "Moments", "NotFittedError", "l2_normalize", "support_moments"]

#: Rows per float64 block in :func:`support_moments`.
MOMENT_BLOCK = 2048


def l2_normalize(a: np.ndarray) -> np.ndarray:
    """Rows of ``a`` divided by their L2 norm; all-zero rows stay zero (no NaN)."""
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    # A zero row has no direction: leave it zero so its scores are 0, not NaN.
    return a / np.where(norms > 0, norms, 1.0)


class Moments:
    """First and second moments of paired rows, in float64.

    Attributes:
        n: number of rows.
        mean_x, mean_y: column means.
        Kxx, Kyy, Kxy: centred scatter matrices ``Xc'Xc``, ``Yc'Yc``, ``Xc'Yc``
            (not divided by ``n - 1``).
    """

    def __init__(
        self,
        n: int,
        mean_x: np.ndarray,
        mean_y: np.ndarray,
        Kxx: np.ndarray,
        Kyy: np.ndarray,
        Kxy: np.ndarray,
    ) -> None:
        self.n, self.mean_x, self.mean_y = n, mean_x, mean_y
        self.Kxx, self.Kyy, self.Kxy = Kxx, Kyy, Kxy


def support_moments(X: np.ndarray, Y: np.ndarray, *, block: int = MOMENT_BLOCK) -> Moments:
    """Means and centred scatter matrices of paired rows, accumulated in float64
    over blocks of ``block`` rows: memory ``O(block * d + d^2)``, never a float64
    copy of the data. Equal to the direct float64 computation up to rounding
    (two passes: the means first, then the centred products)."""
    n = X.shape[0]
    mean_x = np.zeros(X.shape[1])
    mean_y = np.zeros(Y.shape[1])
    for s in range(0, n, block):
        mean_x += X[s : s + block].sum(axis=0, dtype=np.float64)
        mean_y += Y[s : s + block].sum(axis=0, dtype=np.float64)
    mean_x /= n
    mean_y /= n
    Kxx = np.zeros((X.shape[1], X.shape[1]))
    Kyy = np.zeros((Y.shape[1], Y.shape[1]))
    Kxy = np.zeros((X.shape[1], Y.shape[1]))
    for s in range(0, n, block):
        xb = X[s : s + block].astype(np.float64)
        xb -= mean_x
        yb = Y[s : s + block].astype(np.float64)
        yb -= mean_y
        Kxx += xb.T @ xb
        Kyy += yb.T @ yb
        Kxy += xb.T @ yb
    return Moments(n, mean_x, mean_y, Kxx, Kyy, Kxy)


class AlignmentBase(ABC):
    """Base class of the alignment methods: validation, fitted checks, params.

    Attributes set by :meth:`fit` on every method:
        n_features_image_: image dimension seen in ``fit``.
        n_features_text_: text dimension seen in ``fit``.
        n_support_: number of support pairs.
        output_dim_: dimension of the indexable space.
    """

    #: Whether the transforms return scipy CSR matrices (a sparse space).
    sparse_output: ClassVar[bool] = False
    #: Whether the transforms return unit-norm rows, so the aligned inner
    #: product is a cosine. False: the inner product itself is the method's
    #: similarity (CSA's correlation-weighted cosine, local CKA's score), and
    #: a class-prompt ensemble then averages the prompt vectors without
    #: normalising them (a class scores the mean of its prompts' similarities).
    cosine_output: ClassVar[bool] = True
    #: Whether ``_fit`` needs float64 arrays (False: it takes the input's float
    #: dtype and works blockwise; see the module docstring).
    fit_float64: ClassVar[bool] = True
    #: Whether the transforms need float64 input (False: they take float32 or
    #: float64 as it came and convert block by block, so transforming 158,915
    #: float32 captions does not hold a float64 copy of them).
    transform_float64: ClassVar[bool] = True

    # ------------------------------------------------------------------ params
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The ``__init__`` parameters as a dict (recorded in result JSONs)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> AlignmentBase:
        """Set ``__init__`` parameters; unknown names raise. Returns ``self``."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"{type(self).__name__}.set_params: unknown parameter {name!r}; "
                    f"valid parameters: {', '.join(valid)}"
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # --------------------------------------------------------------- contract
    def fit(self, image_emb: Any, text_emb: Any) -> AlignmentBase:
        """Learn the alignment from the paired support set.

        Args:
            image_emb: ``(N, d_image)`` image embeddings of the support pairs.
            text_emb: ``(N, d_text)`` text embeddings; row ``i`` is paired with
                ``image_emb[i]``.

        Returns:
            ``self``.
        """
        X = check_matrix(image_emb, "image_emb", dtype=self._fit_dtype(image_emb), min_rows=1)
        Y = check_matrix(text_emb, "text_emb", dtype=self._fit_dtype(text_emb), min_rows=1)
        if X.shape[0] != Y.shape[0]:
            raise ValueError(
                f"image_emb has {X.shape[0]} rows, text_emb {Y.shape[0]}; "
                "fit expects paired rows (row i of each side is one pair)"
            )
        self._validate_params(X, Y)
        self._fit(X, Y)
        self.n_features_image_ = int(X.shape[1])
        self.n_features_text_ = int(Y.shape[1])
        self.n_support_ = int(X.shape[0])
        self.output_dim_ = int(self._output_dim())
        return self

    def transform_images(self, X: Any) -> Any:
        """Map image embeddings ``(n, d_image)`` into the indexable space (float32)."""
        Xv = self._check_input(X, "X", "image", self._fitted_dim("image"))
        return self._transform_images(Xv)

    def transform_texts(self, Y: Any) -> Any:
        """Map text embeddings ``(n, d_text)`` into the indexable space (float32)."""
        Yv = self._check_input(Y, "Y", "text", self._fitted_dim("text"))
        return self._transform_texts(Yv)

    def release_transform_state(self) -> None:  # noqa: B027 (optional hook, no-op default)
        """Free what only the transforms need, once the caller will transform
        nothing more (an experiment cell after its last transform).

        The default keeps everything (the methods' transform state is small
        next to the aligned spaces); a method whose state is as large as its
        support set (ASIF's normalised anchors: 127 MiB at 29,000 Flickr30k
        pairs) overrides it. After it, its transforms may raise; ``output_dim_``
        and the other fitted attributes stay.
        """

    def similarity(self, X: Any, Y: Any) -> np.ndarray:
        """The method's score matrix ``(len(X), len(Y))`` in float64, from its definition."""
        Xv = self._check_input(X, "X", "image", self._fitted_dim("image"), float64=True)
        Yv = self._check_input(Y, "Y", "text", self._fitted_dim("text"), float64=True)
        return np.asarray(self._similarity(Xv, Yv), dtype=np.float64)

    # ---------------------------------------------------------------- helpers
    def _fit_float64(self) -> bool:
        """Whether this instance's ``_fit`` needs float64 input (default: the class's flag)."""
        return self.fit_float64

    def _fit_dtype(self, x: Any) -> Any:
        """float64, or the input's own float dtype when ``_fit`` works blockwise."""
        if self._fit_float64():
            return np.float64
        dt = getattr(x, "dtype", None)
        return dt if dt in (np.float32, np.float64) else np.float64

    def check_is_fitted(self) -> None:
        """Raise :class:`NotFittedError` when ``fit`` has not been called."""
        if not hasattr(self, "output_dim_"):
            raise NotFittedError(
                f"{type(self).__name__} is not fitted; call fit(image_emb, text_emb) first"
            )

    def _input_dtype(self, x: Any) -> Any:
        """float64, or the input's own float dtype when the transforms convert blockwise."""
        if self.transform_float64:
            return np.float64
        dt = getattr(x, "dtype", None)
        return dt if dt in (np.float32, np.float64) else np.float64

    def _fitted_dim(self, side: str) -> int:
        self.check_is_fitted()
        return self.n_features_image_ if side == "image" else self.n_features_text_

    def _check_input(
        self, x: Any, name: str, side: str, dim: int, *, float64: bool = False
    ) -> np.ndarray:
        m = check_matrix(x, name, dtype=np.float64 if float64 else self._input_dtype(x))
        if m.shape[1] != dim:
            raise ValueError(
                f"{name} has dimension {m.shape[1]}, the method was fitted on {dim} "
                f"({side} side of {type(self).__name__})"
            )
        return m

    # ------------------------------------------------------- for subclasses
    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:  # noqa: B027
        """Check parameters against the support set; raise on bad values.

        Optional: a method without parameters to check (identity) keeps this.
        """

    @abstractmethod
    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        """Learn the state from validated float64 support pairs."""

    @abstractmethod
    def _output_dim(self) -> int:
        """Dimension of the indexable space (after ``_fit``)."""

    @abstractmethod
    def _transform_images(self, X: np.ndarray) -> Any:
        """Map validated float64 image rows; float32 ndarray or CSR."""

    @abstractmethod
    def _transform_texts(self, Y: np.ndarray) -> Any:
        """Map validated float64 text rows; float32 ndarray or CSR."""

    @abstractmethod
    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """The score matrix from the method's definition (not the transforms)."""
