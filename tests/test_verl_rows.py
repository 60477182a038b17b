"""What the veRL trainer reads back per rollout after veRL's advantage step (`response_rows`), and the line
it logs from it (`rollout_metrics`): numpy only, no veRL import."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpo.verl_ext.estimators import response_rows, rollout_metrics, stage_from_extra_info

EOS, LIMIT = 9, 4


def test_each_rollout_gets_its_tokens_advantage_length_and_whether_it_ended():
    rows = [  # (per-token advantages, mask, tokens)
        ([0.5, 0.5], [1, 1], [3, 9]),  # ended on the end token, under the limit
        ([-1.0, -1.0, -1.0, -1.0], [1, 1, 1, 1], [1, 2, 3, 9]),  # at the limit, its last token the end token
        ([2.0, 2.0, 2.0, 2.0], [1, 1, 1, 1], [1, 2, 3, 4]),  # cut by the limit
        ([0.0, 0.7, 0.7], [0, 1, 1], [5, 6, 7]),  # a masked first position: the first real token's value
        ([], [], []),  # no response token at all
    ]
    values, masks, tokens = ([np.asarray(row[i]) for row in rows] for i in range(3))
    advantages, lengths, ended = response_rows(values, masks, tokens, eos_token_id=EOS, max_length=LIMIT)
    np.testing.assert_array_equal(advantages, [0.5, -1.0, 2.0, 0.7, 0.0])
    np.testing.assert_array_equal(lengths, [2, 4, 4, 2, 0])
    assert ended == [True, True, False, True, False]


def test_the_logged_line_is_the_builders_under_the_prefix():
    extras = [
        {
            "score": 1.0,
            "acc": 1.0,
            "num_answers": 1.0,
            "strategy": "a",
            "sub_scores": json.dumps([[1.0, 0.0]]),
            "x": 1.0,
            "y": 0.0,
        },
        {
            "score": 0.0,
            "acc": 0.0,
            "num_answers": 0.0,
            "strategy": "degenerate",
            "sub_scores": "[]",
            "x": 0.0,
            "y": 0.0,
        },
    ]
    staged = stage_from_extra_info(extras)
    staged.diagnostics["vpo/pool_size_mean"] = 1.0
    line = rollout_metrics(
        staged,
        ["g", "g"],
        objectives=["x", "y"],
        advantages=np.array([0.7, -0.7]),
        lengths=np.array([3.0, 4.0]),
        ended=[True, False],
        judged={"judge/groups": 1.0},
    )
    assert all(key.startswith("vpo/") for key in line)
    assert line["vpo/score_mean"] == 0.5 and line["vpo/acc"] == 0.5 and line["vpo/parse_failure_rate"] == 0.5
    assert line["vpo/reward/x"] == 0.5 and line["vpo/strategies_per_group"] == 1.0
    assert line["vpo/advantage/max"] == 0.7 and line["vpo/advantage/zero_group_frac"] == 0.0
    assert line["vpo/response_length_mean"] == 3.5 and line["vpo/truncated_share"] == 0.5
    assert line["vpo/vpo/pool_size_mean"] == 1.0 and line["vpo/judge/groups"] == 1.0
    assert line["vpo/pool_diversity"] == pytest.approx(0.0)  # one row in the group's pool: no pair
