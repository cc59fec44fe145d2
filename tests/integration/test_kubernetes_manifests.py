"""`trun run -s kubernetes --dryrun`: every manifest trun produces, for a
spread of components and run options, is valid under the published schemas
(Kubernetes v1.34's Secret, Job and Service, Volcano's and JobSet's CRDs;
see data/kubernetes/SOURCES.md), checked by Debian's python3-jsonschema. Bad
input is exit 2 before anything is sent (no kubeconfig is needed)."""
import copy
import functools
import gzip
import json
import re

import pytest
import yaml

from conftest import ROOT, base_env, trun

DATA = ROOT / "tests" / "integration" / "data" / "kubernetes"
jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.once("the Kubernetes objects and client are trun's own; no torch runs")


def strict(schema):
    """yannh/kubernetes-json-schema's -strict: listed properties only."""
    if isinstance(schema, dict):
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


# libyaml's loader where python3-yaml has it: the CRDs take 1.3 s to read in
# pure Python, 0.15 s with it.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def crd_schema(name, version):
    crd = yaml.load(gzip.open(DATA / name, "rt"), Loader=LOADER)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
    raise AssertionError(f"{name} has no version {version}")


def json_schema(name):
    return strict(json.load(gzip.open(DATA / name, "rt")))


@functools.cache
def schemas():
    """The schemas by (apiVersion, kind), read when a test first asks: every
    pytest process imports this file to collect it, also in the passes that
    deselect it."""
    return {
        ("batch.volcano.sh/v1alpha1", "Job"): crd_schema("batch.volcano.sh_jobs.yaml.gz",
                                                         "v1alpha1"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"): crd_schema("jobset.x-k8s.io_jobsets.yaml.gz",
                                                           "v1alpha2"),
        ("batch/v1", "Job"): json_schema("job-batch-v1.json.gz"),
        ("v1", "Service"): json_schema("service-v1.json.gz"),
        ("v1", "Secret"): json_schema("secret-v1.json.gz"),
    }


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def env(tmp_path):
    # No kubeconfig anywhere: --dryrun and bad input must not need one.
    return base_env(HOME=tmp_path, KUBECONFIG="", TRUNCONFIG="")


def manifests(tmp_path, *args):
    r = trun("run", "-s", "kubernetes", "--dryrun", *args, env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.err
    text = r.out.split("=== SCHEDULER REQUEST ===\n", 1)[1]
    return [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]


def pod_templates(obj):
    if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano"):
        return [t["template"] for t in obj["spec"]["tasks"]]
    if obj["kind"] == "JobSet":
        return [r["template"]["spec"]["template"] for r in obj["spec"]["replicatedJobs"]]
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]]
    return []


def check_job_token(objects):
    """The first object is the job token's Secret, named as the app; every
    role container reads it, and it is nowhere else."""
    secret = objects[0]
    assert (secret["apiVersion"], secret["kind"], secret["type"]) == ("v1", "Secret", "Opaque")
    name = secret["metadata"]["name"]
    assert secret["metadata"]["labels"]["app.kubernetes.io/instance"] == name
    assert list(secret["stringData"]) == ["job-token"]
    token = secret["stringData"]["job-token"]
    assert re.fullmatch(r"[0-9a-f]{64}", token), token
    ref = {"name": "TRUN_JOB_TOKEN",
           "valueFrom": {"secretKeyRef": {"name": name, "key": "job-token"}}}
    for obj in objects[1:]:
        assert token not in json.dumps(obj)
        for pod in pod_templates(obj):
            for c in pod["spec"]["containers"]:
                assert ref in c["env"], c["env"]
            for c in pod["spec"].get("initContainers", []):
                assert "TRUN_JOB_TOKEN" not in json.dumps(c)


def check(objects):
    assert objects
    check_job_token(objects)
    for obj in objects:
        schema = schemas()[(obj["apiVersion"], obj["kind"])]
        jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)
        assert DNS_LABEL.match(obj["metadata"]["name"]), obj["metadata"]["name"]
        for pod in pod_templates(obj):
            for k, v in pod["metadata"]["labels"].items():
                assert LABEL_VALUE.match(v), (k, v)
            for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
                assert DNS_LABEL.match(c["name"])


APPDEF = """
name: Two.Roles
roles:
  - name: trainer
    image: ghcr.io/me/train:1
    entrypoint: python3
    args: [train.py, --rank0, "${rank0_env}", --id, "${replica_id}"]
    num_replicas: 3
    min_replicas: 2
    max_retries: 2
    retry_policy: REPLICA
    env: {POD_IP: "[FIELD_PATH]status.podIP", DATA: /data}
    port_map: {tb: 6006}
    resource: {cpu: 4, gpu: 1, memMB: 16384, devices: {vpc.amazonaws.com/efa: 1}}
    mounts:
      - type=bind,src=/mnt/data,dst=/data,readonly
      - type=device,src=/dev/fuse,dst=/dev/fuse,perm=rw
    metadata:
      kubernetes:
        spec:
          hostIPC: true
          tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]
  - name: ps
    image: ghcr.io/me/ps:1
    entrypoint: ps-server
    num_replicas: 1
    resource: gpu.small
    mounts: ["type=volume,src=ckpt-claim,dst=/ckpt"]
"""

CASES = {
    "echo": ["-cfg", "queue=default", "utils.echo", "--msg", "hello"],
    "echo-auto": ["-cfg", "workload=auto", "utils.echo", "--num_replicas", "2"],
    "ddp-volcano": ["-cfg", "queue=q,priority_class=high,service_account=trainer",
                    "dist.ddp", "-j", "2x2", "--max_retries", "1", "--script", "train.py",
                    "--mounts", "type=bind,src=/a,dst=/b,readonly", "--", "--lr", "0.1"],
    "ddp-jobset": ["-cfg", "workload=jobset,kueue_queue=team-a,namespace=ml",
                   "dist.ddp", "-j", "1:4x8", "--gpu", "8", "--script", "train.py"],
    "ddp-job": ["-cfg", "workload=job,trun_image=ghcr.io/me/trun:0.1,node_selector=pool:gpu",
                "dist.ddp", "-j", "3x1", "--rdzv_backend", "static", "--script", "train.py"],
    "sh-tolerations": ["-cfg", "queue=default,tolerations='nvidia.com/gpu:NoSchedule;spot=1',"
                       "reserved_millicpu=200,reserved_memmb=512,efa_device_count=0",
                       "utils.sh", "--num_replicas", "2", "-h", "aws_p4d.24xlarge", "echo", "hi"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_component_manifests_match_the_published_schemas(tmp_path, case):
    check(manifests(tmp_path, *CASES[case]))


@pytest.mark.parametrize("workload", ["volcano", "jobset", "job"])
def test_appdef_file_with_every_feature_matches_the_schemas(tmp_path, workload):
    (tmp_path / "app.yaml").write_text(APPDEF)
    objects = manifests(tmp_path, "-cfg", f"queue=default,workload={workload}",
                        str(tmp_path / "app.yaml"))
    check(objects)
    pods = [p for o in objects for p in pod_templates(o)]
    assert pods[0]["spec"]["hostIPC"] is True
    tolerations = pods[0]["spec"]["tolerations"]
    assert tolerations[-1]["key"] == "dedicated"


def test_the_schemas_catch_a_misspelt_field():
    bad = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": {"template": {"spec": {"containers": [{"name": "x", "imagePullPolicyy": "Always"}]}}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas()[("batch/v1", "Job")], cls=jsonschema.Draft7Validator)


@pytest.mark.parametrize("args, says", [
    (["-cfg", "queue=q,namespace=Team_A", "utils.echo"], "-cfg namespace=Team_A: a namespace is a DNS label"),
    (["-cfg", "queue=q", "utils.echo", "--msg", "x", "--num_replicas", "1"], None),
    (["utils.echo"], "-cfg queue: the volcano workload needs a Volcano queue"),
    (["-cfg", "workload=mpi", "utils.echo"], "expected volcano, jobset, job or auto"),
    (["-cfg", "queue=q,tolerations=a:Never", "utils.echo"], "NoSchedule, PreferNoSchedule or NoExecute"),
])
def test_bad_input_is_exit_2_naming_the_problem(tmp_path, args, says):
    r = trun("run", "-s", "kubernetes", *args, env=env(tmp_path), cwd=tmp_path)
    if says is None:
        # A good one gets as far as the cluster: here there is none (exit 3).
        assert r.returncode == 3 and "no Kubernetes configuration" in r.err, r.err
        return
    assert r.returncode == 2, (r.returncode, r.err)
    assert says in r.err, r.err


def test_a_name_over_63_characters_is_exit_2(tmp_path):
    (tmp_path / "app.yaml").write_text(
        "name: a-very-long-application-name-for-kubernetes\nroles:\n"
        "  - {name: trainer-with-a-long-name, image: i, entrypoint: e}\n")
    r = trun("run", "-s", "kubernetes", "-cfg", "queue=q", str(tmp_path / "app.yaml"),
             env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 2, r.err
    assert "Kubernetes allows 63" in r.err and "shorten the app name" in r.err, r.err


def test_resources_beyond_the_node_type_are_exit_2(tmp_path):
    (tmp_path / "app.yaml").write_text(
        "name: big\nroles:\n  - name: trainer\n    image: i\n    entrypoint: e\n"
        "    resource: {cpu: 200, gpu: 1, memMB: 1000,\n"
        "               capabilities: {node.kubernetes.io/instance-type: g5.xlarge}}\n")
    r = trun("run", "-s", "kubernetes", "-cfg", "queue=q", str(tmp_path / "app.yaml"),
             env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 2, r.err
    assert "role 'trainer': cannot fit on a g5.xlarge node" in r.err, r.err
    assert "cpu=200 (it has 4)" in r.err, r.err


def test_dryrun_yaml_is_what_kubectl_apply_reads(tmp_path):
    """Each document is one object with apiVersion, kind and metadata; the
    Secret the pods read comes first."""
    objects = manifests(tmp_path, "-cfg", "workload=job", "utils.echo")
    assert [o["kind"] for o in objects] == ["Secret", "Service", "Job"]
    assert set(objects[0]) >= {"apiVersion", "kind", "metadata", "stringData"}
    for obj in objects[1:]:
        assert set(obj) >= {"apiVersion", "kind", "metadata", "spec"}


def manifests_only(tmp_path, *args):
    return trun("run", "-s", "kubernetes", "--dryrun", "--manifests", *args, env=env(tmp_path),
                cwd=tmp_path)


@pytest.mark.parametrize("workload", ["volcano", "jobset", "job", "auto"])
def test_manifests_only_prints_the_objects_and_nothing_else(tmp_path, workload):
    args = ["-cfg", f"queue=default,workload={workload}", "dist.ddp", "-j", "2x1", "--script",
            "train.py"]
    r = manifests_only(tmp_path, *args)
    assert r.returncode == 0, r.err
    # Every line belongs to a YAML document of an API object: no banner, no comment.
    assert r.out.startswith("---\n") and "===" not in r.out and "\n#" not in r.out, r.out
    objects = list(yaml.load_all(r.out, Loader=LOADER))
    assert all(isinstance(o, dict) and o["apiVersion"] and o["kind"] for o in objects), objects
    check(objects)
    # The same objects --dryrun shows after its banner (names are random per run).
    assert [(o["apiVersion"], o["kind"]) for o in objects] == [
        (o["apiVersion"], o["kind"]) for o in manifests(tmp_path, *args)]
    if workload == "auto":
        assert "workload=auto: these are a JobSet" in r.err and "workload=job" in r.err, r.err
    else:
        assert r.err == "", r.err


@pytest.mark.parametrize("args, says", [
    (["-s", "kubernetes", "-cfg", "queue=q", "utils.echo"], "--manifests goes with --dryrun"),
    (["-s", "kubernetes", "--dryrun", "--json", "-cfg", "queue=q", "utils.echo"],
     "--manifests goes with --dryrun, without --json"),
    (["-s", "local", "--dryrun", "utils.echo"],
     "the local scheduler has none (use -s kubernetes"),
])
def test_manifests_only_refuses_what_it_cannot_print(tmp_path, args, says):
    r = trun("run", "--manifests", *args, env=env(tmp_path), cwd=tmp_path)
    assert r.returncode == 2, r.err
    assert says in r.err and r.out == "", r.err
