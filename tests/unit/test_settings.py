"""Settings: every option from the command line, TAPEPROXY_* or tapeproxy.toml, in that order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from tapeproxy.cli import main as cli_main
from tapeproxy.cli import server as cli_server
from tapeproxy.errors import ConfigError
from tapeproxy.modes import Mode
from tapeproxy.settings import RepeatPolicy, Settings, env_name, option_name
from tapeproxy.sources import load_settings, parse_pairs

# field -> (TAPEPROXY_* value, command-line arguments, the value both must give). Every field of
# Settings must be here, with a value other than its default.
SAMPLES: dict[str, tuple[str, list[str], Any]] = {
    "mode": ("record", ["--mode", "record"], Mode.RECORD),
    "host": ("0.0.0.0", ["--host", "0.0.0.0"], "0.0.0.0"),
    "port": ("9999", ["--port", "9999"], 9999),
    "cassettes": ("/tmp/tapes", ["--cassettes", "/tmp/tapes"], "/tmp/tapes"),
    "cassette": ("suite/test_a", ["--cassette", "suite/test_a"], "suite/test_a"),
    "upstream": (
        "local=http://127.0.0.1:1234/, openai=https://proxy.example",
        [
            "--upstream",
            "local=http://127.0.0.1:1234/",
            "--upstream",
            "openai=https://proxy.example",
        ],
        {"local": "http://127.0.0.1:1234", "openai": "https://proxy.example"},
    ),
    "live": ("openai, ,gemini", ["--live", "openai", "--live", "gemini"], ("openai", "gemini")),
    "record_failures": ("true", ["--record-failures"], True),
    "resign": ("aws", ["--resign", "aws"], "aws"),
    "replay_timing": ("0.5", ["--replay-timing", "0.5"], "0.5"),
    "repeat": ("cycle", ["--repeat", "cycle"], RepeatPolicy.CYCLE),
    "strict_order": ("1", ["--strict-order"], True),
    "fail_on_unused": ("yes", ["--fail-on-unused"], True),
    "ignore": (
        "openai:body:user,*:query:ts",
        ["--ignore", "openai:body:user", "--ignore", "*:query:ts"],
        ("openai:body:user", "*:query:ts"),
    ),
    "connect_timeout": ("2.5", ["--connect-timeout", "2.5"], 2.5),
    "read_timeout": ("30", ["--read-timeout", "30"], 30.0),
    "shutdown_timeout": ("0", ["--shutdown-timeout", "0"], 0.0),
    "log_level": ("DEBUG", ["--log-level", "DEBUG"], "debug"),
    "max_body": ("512KiB", ["--max-body", "512KiB"], 512 * 1024),
    "max_record": ("1048576", ["--max-record", "1MiB"], 1024 * 1024),
    "max_frame": ("2097152", ["--max-frame", "2MiB"], 2 * 1024 * 1024),
    "cache_size": ("10485760", ["--cache-size", "10MiB"], 10 * 1024 * 1024),
    "admin_token": (
        "0123456789abcdef-x",
        ["--admin-token", "0123456789abcdef-x"],
        "0123456789abcdef-x",
    ),
    "redact_field": (
        "messages[*].content, user.email",
        ["--redact-field", "messages[*].content", "--redact-field", "user.email"],
        ("messages[*].content", "user.email"),
    ),
    "redact_pattern": (
        "\\d{3,4}-\\d{4}\nsk-[a-z]+",
        ["--redact-pattern", "\\d{3,4}-\\d{4}", "--redact-pattern", "sk-[a-z]+"],
        ("\\d{3,4}-\\d{4}", "sk-[a-z]+"),
    ),
    "redact_keep": (
        "jwt, AWS",
        ["--redact-keep", "jwt", "--redact-keep", "aws"],
        ("jwt", "aws"),
    ),
    "ready_file": ("run/url", ["--ready-file", "run/url"], Path("run/url")),
    "fault": (
        "slow:ttfb=5,gap=1@2,4\nreset@p=0.5",
        ["--fault", "slow:ttfb=5,gap=1@2,4", "--fault", "reset@p=0.5"],
        ("slow:ttfb=5,gap=1@2,4", "reset@p=0.5"),
    ),
    "fault_seed": ("7", ["--fault-seed", "7"], 7),
    "forward": ("true", ["--forward"], True),
    "ca_cert": ("run/ca.pem", ["--ca-cert", "run/ca.pem"], Path("run/ca.pem")),
    "intercept": (
        "api.example.com, *.Example.org",
        ["--intercept", "api.example.com", "--intercept", "*.Example.org"],
        ("api.example.com", "*.example.org"),
    ),
    "allow_host": ("pypi.org", ["--allow-host", "pypi.org"], ("pypi.org",)),
}


@pytest.fixture(autouse=True)
def no_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty folder, so the default ./tapeproxy.toml is the test's own or absent."""
    monkeypatch.chdir(tmp_path)


def serve_options() -> dict[str, str]:
    """`--option` -> parameter name, read off the command Typer builds (it vendors click)."""
    command: Any = typer.main.get_command(cli_main.app)
    params = command.commands["serve"].params
    return {opt: p.name for p in params if p.param_type_name == "option" for opt in p.opts}


def run_serve(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """`tapeproxy serve ARGS` as a user runs it, stopping just before a server would start."""
    seen: list[Settings] = []

    def fake_serve(settings: Settings) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(cli_server, "serve", fake_serve)
    result = CliRunner().invoke(cli_main.app, ["serve", *args], env=env)
    assert result.exit_code == 0, result.output
    return seen[0]


def test_samples_cover_every_field_with_a_non_default_value() -> None:
    assert set(SAMPLES) == set(Settings.model_fields)
    defaults = load_settings({}, environ={})
    for field, (_, _, value) in SAMPLES.items():
        assert getattr(defaults, field) != value, field


def test_every_field_has_a_serve_option_and_every_option_a_field() -> None:
    options = serve_options()
    assert {option_name(field) for field in Settings.model_fields} | {"--config"} == set(options)
    assert all(options[option_name(field)] == field for field in Settings.model_fields)


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_every_field_is_read_from_its_environment_variable(field: str) -> None:
    raw, _, expected = SAMPLES[field]
    assert env_name(field) == "TAPEPROXY_" + field.upper()
    assert getattr(load_settings({}, environ={env_name(field): raw}), field) == expected


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_every_field_is_set_by_its_command_line_option(
    field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, args, expected = SAMPLES[field]
    assert getattr(run_serve(args, {}, monkeypatch), field) == expected


def test_negative_flags_turn_an_option_off(monkeypatch: pytest.MonkeyPatch) -> None:
    on = {env_name(field): "1" for field in ("record_failures", "strict_order", "fail_on_unused")}
    off = ["--no-record-failures", "--any-order", "--allow-unused"]
    settings = run_serve(off, on, monkeypatch)
    assert (settings.record_failures, settings.strict_order, settings.fail_on_unused) == (
        False,
        False,
        False,
    )


# Which sources set `mode` (file, env, cli) -> the mode that wins.
PRECEDENCE = [
    ((), Mode.REPLAY),
    (("file",), Mode.AUTO),
    (("env",), Mode.RECORD),
    (("cli",), Mode.PASSTHROUGH),
    (("file", "env"), Mode.RECORD),
    (("file", "cli"), Mode.PASSTHROUGH),
    (("env", "cli"), Mode.PASSTHROUGH),
    (("file", "env", "cli"), Mode.PASSTHROUGH),
]


@pytest.mark.parametrize(("sources", "winner"), PRECEDENCE)
def test_command_line_beats_environment_beats_file_beats_default(
    sources: tuple[str, ...], winner: Mode, tmp_path: Path
) -> None:
    if "file" in sources:
        (tmp_path / "tapeproxy.toml").write_text('mode = "auto"\nport = 1111\n')
    environ = {"TAPEPROXY_MODE": "record"} if "env" in sources else {}
    given = {"mode": "passthrough"} if "cli" in sources else {}
    settings = load_settings(given, environ=environ)
    assert settings.mode is winner
    assert settings.port == (1111 if "file" in sources else 8787)


@pytest.mark.parametrize(("sources", "winner"), PRECEDENCE)
def test_precedence_through_the_real_command_line(
    sources: tuple[str, ...], winner: Mode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "file" in sources:
        (tmp_path / "tapeproxy.toml").write_text('mode = "auto"\n')
    env = {"TAPEPROXY_MODE": "record"} if "env" in sources else {}
    args = ["--mode", "passthrough"] if "cli" in sources else []
    assert run_serve(args, env, monkeypatch).mode is winner


def test_config_file_named_by_option_or_variable(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text('host = "default-file"\n')
    (tmp_path / "a.toml").write_text('host = "from-a"\n')
    (tmp_path / "b.toml").write_text('host = "from-b"\n')
    assert load_settings({}, environ={}).host == "default-file"
    assert load_settings({}, environ={"TAPEPROXY_CONFIG": "b.toml"}).host == "from-b"
    given = load_settings({}, environ={"TAPEPROXY_CONFIG": "b.toml"}, config=tmp_path / "a.toml")
    assert given.host == "from-a"


def test_a_named_config_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml does not exist"):
        load_settings({}, environ={}, config=tmp_path / "nope.toml")


def test_a_config_file_that_is_not_toml_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text("mode = \n")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_settings({}, environ={})


def test_config_file_takes_dashed_keys_lists_and_tables(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text(
        'log-level = "warning"\nlive = ["openai"]\nrecord_failures = true\n'
        'upstream = ["local=http://127.0.0.1:9/"]\n'
    )
    settings = load_settings({}, environ={})
    assert (settings.log_level, settings.live, settings.record_failures) == (
        "warning",
        ("openai",),
        True,
    )
    assert settings.upstream == {"local": "http://127.0.0.1:9"}
    (tmp_path / "tapeproxy.toml").write_text('[upstream]\nlocal = "http://127.0.0.1:9"\n')
    assert load_settings({}, environ={}).upstream == {"local": "http://127.0.0.1:9"}


def test_match_tables_in_the_config_file_become_ignore_rules(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text(
        'ignore = ["*:query:ts"]\n'
        '[match.openai]\nignore_body = ["user", "metadata.id"]\nkey_headers = ["X-Tenant"]\n'
        '[match."*"]\nignore_headers = ["x-trace"]\nignore_query = ["sig2"]\n'
    )
    assert load_settings({}, environ={}).ignore == (
        "*:query:ts",
        "openai:body:user",
        "openai:body:metadata.id",
        "openai:key-header:X-Tenant",
        "*:header:x-trace",
        "*:query:sig2",
    )


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('match = "openai:body:user"', "must be tables like [match.openai]"),
        ('[match.openai]\nignore_fields = ["user"]', "[match.openai] takes the lists of strings"),
        ('[match.openai]\nignore_body = "user"', "[match.openai] takes the lists of strings"),
        ("[match.openai]\nignore_body = [1, 2]", "[match.openai] takes the lists of strings"),
        ('[match.openai]\nignore_body = ["a..b"]', "'openai:body:a..b'"),
    ],
)
def test_a_bad_match_table_is_an_error(toml: str, problem: str, tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({}, environ={})
    assert problem in caught.value.message


def test_an_unknown_config_key_lists_the_known_ones(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text('mode = "auto"\nbogus_key = 1\n')
    with pytest.raises(ConfigError) as caught:
        load_settings({}, environ={})
    message = caught.value.message
    assert "bogus_key" in message and "known keys" in message
    assert all(field in message for field in Settings.model_fields)


@pytest.mark.parametrize(
    ("cli_given", "environ", "file", "expected"),
    [
        ({}, {"TAPEPROXY_MODE": "bogus"}, "", ["--mode", "TAPEPROXY_MODE", "'bogus'", "record"]),
        ({"mode": "bogus"}, {}, "", ["--mode 'bogus': Input should be", "passthrough"]),
        ({}, {}, 'mode = "bogus"', ["--mode", "mode in tapeproxy.toml", "replay"]),
        ({}, {"TAPEPROXY_PORT": "http"}, "", ["--port", "TAPEPROXY_PORT", "'http'"]),
        ({}, {"TAPEPROXY_PORT": "70000"}, "", ["--port", "TAPEPROXY_PORT", "65535"]),
        ({}, {"TAPEPROXY_REPEAT": "never"}, "", ["--repeat", "TAPEPROXY_REPEAT", "repeat-last"]),
        ({}, {"TAPEPROXY_LOG_LEVEL": "loud"}, "", ["--log-level", "debug, info, warning, error"]),
        ({}, {"TAPEPROXY_REPLAY_TIMING": "fast"}, "", ["--replay-timing", "none, recorded"]),
        (
            {},
            {"TAPEPROXY_CASSETTE": "../up"},
            "",
            ["--cassette", "TAPEPROXY_CASSETTE", "not allowed"],
        ),
        (
            {},
            {"TAPEPROXY_IGNORE": "openai:nope:x"},
            "",
            ["--ignore", "TAPEPROXY_IGNORE", "key-header"],
        ),
        ({}, {"TAPEPROXY_STRICT_ORDER": "maybe"}, "", ["--strict-order", "TAPEPROXY_STRICT_ORDER"]),
        ({}, {"TAPEPROXY_CONNECT_TIMEOUT": "0"}, "", ["--connect-timeout", "greater than 0"]),
        ({"live": ("opneai",)}, {}, "", ["--live", "no upstream named 'opneai'", "openai"]),
        (
            {"ignore": ("opneai:body:user",)},
            {},
            "",
            ["--ignore", "'opneai:body:user'", "known upstreams"],
        ),
        (
            {},
            {"TAPEPROXY_REPEAT": "cycle", "TAPEPROXY_STRICT_ORDER": "1"},
            "",
            ["--strict-order", "--repeat cycle"],
        ),
        (
            {},
            {"TAPEPROXY_UPSTREAM": "search"},
            "",
            ["TAPEPROXY_UPSTREAM", "'search' is not NAME=URL"],
        ),
        ({"resign": "gcp"}, {}, "", ["--resign 'gcp': Input should be 'aws'"]),
    ],
)
def test_a_bad_value_names_the_option_the_source_and_what_is_allowed(
    cli_given: dict[str, Any],
    environ: dict[str, str],
    file: str,
    expected: list[str],
    tmp_path: Path,
) -> None:
    if file:
        (tmp_path / "tapeproxy.toml").write_text(file + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(cli_given, environ=environ)
    assert all(part in caught.value.message for part in expected), caught.value.message


def test_a_bad_value_on_the_command_line_exits_2_with_the_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli_server, "serve", lambda settings: pytest.fail("server started"))
    result = CliRunner().invoke(cli_main.app, ["serve"], env={"TAPEPROXY_PORT": "nope"})
    assert result.exit_code == 2
    assert "TAPEPROXY_PORT" in result.output and "--port" in result.output


@pytest.mark.parametrize(
    ("items", "pairs"),
    [
        (["a=http://x"], {"a": "http://x"}),
        ([" a = http://x/y?q=1 ", "b=https://z"], {"a": "http://x/y?q=1", "b": "https://z"}),
        (["a=http://x", "a=http://y"], {"a": "http://y"}),
        ([], {}),
    ],
)
def test_parse_pairs(items: list[str], pairs: dict[str, str]) -> None:
    assert parse_pairs(items, "upstream") == pairs


@pytest.mark.parametrize("item", ["openai", "=http://x", "openai=", ""])
def test_parse_pairs_refuses_what_is_not_name_equals_url(item: str) -> None:
    with pytest.raises(ConfigError, match=f"--upstream: {item!r} is not NAME=URL"):
        parse_pairs([item], "upstream")


@pytest.mark.parametrize(
    ("upstream", "problem"),
    [
        ({"OpenAI": "http://x"}, "lowercase"),
        ({"my upstream": "http://x"}, "lowercase"),
        ({"-x": "http://x"}, "lowercase"),
        ({"v1": "http://x"}, "lowercase"),
        ({"__tapeproxy": "http://x"}, "lowercase"),
        ({"local": "ftp://x"}, "http:// or https://"),
        ({"local": "localhost:8080"}, "http:// or https://"),
        ({"local": "http://"}, "http:// or https://"),
        ({"local": "http://x/a#b"}, "no #fragment"),
        ({"local": "http://x/a?key=1"}, r"no \?query"),
        ({"local": "http://x/a b"}, "no space"),
    ],
)
def test_upstream_names_and_urls_are_validated(upstream: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        load_settings({"upstream": upstream}, environ={})


def test_upstream_urls_lose_their_trailing_slash() -> None:
    settings = load_settings({"upstream": {"my-llm_2": "https://llm.example/api/"}}, environ={})
    assert settings.upstream == {"my-llm_2": "https://llm.example/api"}


@pytest.mark.parametrize(
    ("variable", "raw", "field", "value"),
    [
        ("TAPEPROXY_LIVE", "openai", "live", ("openai",)),
        ("TAPEPROXY_LIVE", " openai ,gemini,, ", "live", ("openai", "gemini")),
        ("TAPEPROXY_IGNORE", "*:query:ts , *:body:user", "ignore", ("*:query:ts", "*:body:user")),
        (
            "TAPEPROXY_UPSTREAM",
            "a=http://a, b=http://b",
            "upstream",
            {"a": "http://a", "b": "http://b"},
        ),
        ("TAPEPROXY_LIVE", "", "live", ()),
    ],
)
def test_comma_separated_environment_lists(variable: str, raw: str, field: str, value: Any) -> None:
    assert getattr(load_settings({}, environ={variable: raw}), field) == value


def test_settings_are_frozen_and_refuse_unknown_fields() -> None:
    settings = load_settings({}, environ={})
    with pytest.raises(ValueError):
        settings.port = 1
    with pytest.raises(ValueError, match="bogus"):
        Settings.model_validate({"bogus": 1})


def test_upstreams_from_each_layer_merge_by_name_with_the_command_line_winning(
    tmp_path: Path,
) -> None:
    config = tmp_path / "tapeproxy.toml"
    config.write_text('upstream = ["search=http://file:1", "openai=http://file:2"]\n')
    settings = load_settings(
        {"upstream": {"openai": "http://cli:3"}},
        environ={"TAPEPROXY_UPSTREAM": "tools=http://env:4"},
        config=config,
    )
    assert settings.upstream == {
        "search": "http://file:1",
        "openai": "http://cli:3",
        "tools": "http://env:4",
    }


def test_live_and_rules_may_name_an_upstream_added_by_the_same_settings() -> None:
    settings = load_settings(
        {"live": ("Search",), "ignore": ("search:query:ts",)},
        environ={"TAPEPROXY_UPSTREAM": "search=http://127.0.0.1:9"},
    )
    assert settings.live == ("search",), "upstream names are lowercase"
    assert settings.ignore == ("search:query:ts",)


def test_a_redact_table_in_the_config_file_sets_the_redaction_rules(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text(
        '[redact]\nfields = ["user.email"]\npatterns = ["\\\\d{3},\\\\d{4}"]\n'
    )
    settings = load_settings({}, environ={})
    assert settings.redact_field == ("user.email",)
    assert settings.redact_pattern == ("\\d{3},\\d{4}",)


def test_a_faults_table_in_the_config_file_sets_the_faults_and_seed(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text('[faults]\nspecs = ["cut:after=2@1,3"]\nseed = 4\n')
    settings = load_settings({}, environ={})
    assert (settings.fault, settings.fault_seed) == (("cut:after=2@1,3",), 4)


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('[faults]\nspecs = "reset"', "[faults] takes specs"),
        ('[faults]\nspec = ["reset"]', "[faults] takes specs"),
        ('[faults]\nspecs = ["reset@0"]', "fault 'reset@0'"),
    ],
)
def test_a_bad_faults_table_is_an_error(toml: str, problem: str, tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({}, environ={})
    assert problem in caught.value.message


def test_the_redact_table_opts_out_of_key_formats(tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text('[redact]\nkeep = ["jwt", "all"]\n')
    assert load_settings({}, environ={}).redact_keep == ("jwt", "all")


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"redact_pattern": ("([a-z",)}, "not a valid regular expression"),
        ({"redact_pattern": ("red",)}, "matches the marker [redacted]"),
        ({"redact_field": ("a..b",)}, "empty segment"),
        ({"redact_field": ("a[x]",)}, "is not of the form"),
        ({"redact_keep": ("openai", "stripe")}, "no key format named 'stripe'; known formats"),
    ],
)
def test_a_bad_redaction_rule_is_a_clear_error(given: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(given, environ={})
    assert problem in caught.value.message and "--redact-" in caught.value.message


@pytest.mark.parametrize(
    "toml", ['redact = ["x"]', '[redact]\nfield = ["x"]', '[redact]\npatterns = "x"']
)
def test_a_bad_redact_table_is_an_error(toml: str, tmp_path: Path) -> None:
    (tmp_path / "tapeproxy.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError, match=r"\[redact\] takes the lists of strings"):
        load_settings({}, environ={})
