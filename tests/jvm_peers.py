"""The JVM peers (issue 47), run beside the connector: the Java Event Hubs SDK 5.x as a single-file program
(``tests/jvm/Peer.java``) on a classpath Maven resolves from ``tests/jvm/pom.xml`` into ``.jvm/`` (ignored; Maven's
own downloads cached in ``.jvm/m2``, so a fresh clone and CI fill it once, and ``./dev setup`` does it first)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JVM = ROOT / ".jvm"
POMS = {
    "sdk": ROOT / "tests" / "jvm" / "pom.xml",
    "old": ROOT / "tests" / "jvm" / "old" / "pom.xml",
    "kafka": ROOT / "tests" / "jvm" / "kafka" / "pom.xml",
    "kafka-spark": ROOT / "tests" / "jvm" / "kafka-spark" / "pom.xml",
}
IN_CI = ("sdk", "old")  # resolved by ./dev setup; the Kafka broker and Spark's Kafka source only when bench jvm runs
OLD_SPARK = "3.5.9"  # the newest Spark 3 (Scala 2.12), where the old connector (built for 3.2) still runs
OLD_VENV = ROOT / ".venv-spark3.5"
OLD_APP = ROOT / "tests" / "jvm" / "old_app.py"
PEER = ROOT / "tests" / "jvm" / "Peer.java"
# the SDK's own INFO and WARN lines are many and say nothing a test reads (its errors still show)
JAVA_OPTIONS = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-XX:+UseSerialGC", "-Xss512k"]


def loopback_address(port: int) -> str:
    """A loopback address (Linux answers on all of 127.0.0.0/8) whose ``port`` is free there, whatever else runs:
    the JVM SDKs take a port-less endpoint (AMQP's 5672, or 5671 for the old connector, which knows no other), so
    each emulator for them gets an address of its own. Chosen by this process's id, a free one among 50."""
    import random
    import socket

    rng = random.Random(os.getpid())
    for _ in range(50):
        host = f"127.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}.{rng.randrange(2, 255)}"
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return host
    raise RuntimeError(f"no loopback address with port {port} free")


def missing() -> str | None:
    """What this machine lacks to run the JVM peers (None: nothing): the tests skip, saying it."""
    lacking = [tool for tool in ("java", "mvn", "keytool") if shutil.which(tool) is None]
    if not lacking:
        return None
    return f"needs {' and '.join(lacking)} (Java 17 and Maven, which resolves the Java SDK from Maven Central)"


def classpath(name: str = "sdk") -> str:
    """The classpath (a folder of jars, as ``folder/*``) of ``tests/jvm/<pom>``, resolved by Maven once per pom
    version."""
    pom = POMS[name]
    stamp = hashlib.sha1(pom.read_bytes()).hexdigest()[:12]
    folder = JVM / f"{name}-lib-{stamp}"
    if not (folder / ".complete").exists():
        done = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), f"-Dmaven.repo.local={JVM / 'm2'}", "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={folder}"],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"Maven could not resolve {pom.relative_to(ROOT)}: {done.stdout[-3000:]}")
        (folder / ".complete").touch()
    return str(folder / "*")


def jars(name: str) -> list[str]:
    """The jar files of a resolved classpath."""
    import glob

    return sorted(glob.glob(classpath(name)[:-1] + "*.jar"))


def old_spark_python() -> str:
    """The Python of a virtual environment with pyspark OLD_SPARK alone, made once (the old connector's Spark)."""
    python = OLD_VENV / "bin" / "python"
    stamp = OLD_VENV / f".installed-pyspark-{OLD_SPARK}"
    if not stamp.exists():
        import sys

        subprocess.run([sys.executable, "-m", "venv", str(OLD_VENV)], check=True, timeout=300)
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pyspark=={OLD_SPARK}"],
                              capture_output=True, text=True, timeout=1200)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pip could not install pyspark {OLD_SPARK}: {done.stderr[-2000:]}")
        stamp.touch()
    return str(python)


def trust_store(ca_file: str, where: Path) -> str:
    """A PKCS12 trust store (password ``changeit``) holding the emulator's authority: the only way the old
    connector's legacy SDK trusts a certificate (it checks the host name, and takes no CA option)."""
    store = where / "emulator-trust.p12"
    if not store.exists():
        subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "eventhubs-emulator", "-file", ca_file,
                        "-keystore", str(store), "-storetype", "PKCS12", "-storepass", "changeit"],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
    return str(store)


def run_old(plan: dict, where: Path, timeout: float = 900) -> dict:
    """Run tests/jvm/old_app.py's ``plan`` on the old connector's Spark; its results."""
    import json

    plan_file, out_file = where / "old-plan.json", where / "old-results.json"
    plan_file.write_text(json.dumps({**plan, "jars": jars("old")}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_HOME"))}  # its own Spark
    done = subprocess.run([old_spark_python(), str(OLD_APP), str(plan_file), str(out_file)], cwd=where,
                          capture_output=True, text=True, timeout=timeout, env=env)  # fmt: skip
    if done.returncode != 0:
        causes = [line for line in done.stderr.splitlines() if ("Exception" in line or "Error" in line)
                  and not line.lstrip().startswith("at ")][:10]  # fmt: skip
        raise AssertionError(f"the old connector failed: {causes} ... {done.stderr[-3000:]}")
    return json.loads(out_file.read_text())  # type: ignore[no-any-return]


def peer(*args: str) -> list[str]:
    """The command line that runs Peer.java with ``args`` (see its header for the verbs)."""
    return ["java", *JAVA_OPTIONS, "-cp", classpath("sdk"), str(PEER), *args]


def run_peer(*args: str, timeout: float = 180) -> str:
    """Run Peer.java to its end; what it printed. A failure shows its error output."""
    done = subprocess.run(peer(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "JAVA_TOOL_OPTIONS": ""})  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"the Java SDK ({args[0]}) failed: {done.stderr[-4000:]}")
    return done.stdout


if __name__ == "__main__":  # ./dev setup resolves the classpaths before any test needs them
    import sys

    if missing() is None:
        for pom_name in IN_CI:
            classpath(pom_name)
        old_spark_python()
    else:
        print(f"note: the JVM peers' tests will be skipped: {missing()}", file=sys.stderr)
