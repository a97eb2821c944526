"""Tests for attn_policies.catalog (the short-name registry) and the package's public names."""

from __future__ import annotations

import pytest
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

import attn_policies
from attn_policies.catalog import (
    EXTRACTORS,
    POLICIES,
    get_extractor,
    get_policy,
    import_object,
)


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_every_registered_extractor_resolves_to_an_sb3_extractor(name: str) -> None:
    cls = get_extractor(name)
    assert issubclass(cls, BaseFeaturesExtractor)
    path = EXTRACTORS[name]
    assert get_extractor(path) is cls
    assert get_extractor(path.replace(":", ".")) is cls


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_registered_policy_resolves_to_an_sb3_policy(name: str) -> None:
    assert issubclass(get_policy(name), BasePolicy)


def test_unknown_short_name_suggests_the_nearest() -> None:
    with pytest.raises(ValueError, match="Did you mean 'awrl'"):
        get_extractor("awrll")
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        get_policy("nope")


def test_bad_import_paths_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"cannot import module .attn_policies\.nope."):
        import_object("attn_policies.nope:Thing")
    with pytest.raises(ValueError, match="did you mean RelationalExtractor"):
        import_object("attn_policies.relational:RelationalExtractr")
    with pytest.raises(ValueError, match="not an import path"):
        import_object("Thing")


@pytest.mark.parametrize("name", attn_policies.__all__)
def test_every_public_name_imports(name: str) -> None:
    assert getattr(attn_policies, name) is not None


def test_unknown_attribute_raises() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = attn_policies.Nope
