import pytest


@pytest.fixture
def record_steps(monkeypatch):
    """record_steps(env) -> list that collects every `env.step` result from then on."""

    def start(env) -> list:
        steps, original_step = [], env.step

        def recording_step(action):
            steps.append(original_step(action))
            return steps[-1]

        monkeypatch.setattr(env, "step", recording_step)
        return steps

    return start
