"""Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`).

kubectl sends built-in kinds this way from its typed commands (`create namespace`, `create
configmap|secret|deployment|service|job|role...`, `run`, `auth can-i`, `drain`), whatever
discovery says: client-go only falls back to JSON after a 415 for CBOR, never for protobuf. So
the emulator decodes them, into the JSON the kind would have had; answers stay JSON (kubectl
accepts `application/json` too).

The encoding: the magic `k8s\\x00`, then a `runtime.Unknown` (typeMeta, raw, contentEncoding,
contentType) whose `raw` is the object's message. Message layouts are those of the upstream
`generated.proto` files (go-to-protobuf; field numbers never change), written below for the
messages a served kind can hold. A field this table does not know is refused (400), never
dropped silently: a create would otherwise store less than was sent.

Zero values: go-to-protobuf writes every non-pointer field, zero or not (`name: ""`,
`generation: 0`, an empty `creationTimestamp`); JSON would have omitted them, so they are
dropped here, except for the fields marked as pointers (`?`), whose presence is meaningful
(`replicas: 0`, `automountServiceAccountToken: false`).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

from sim.kubeapi import errors

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# Layouts: `Message field=N[:type][?] ...`. Types: s string (default), b bytes, B bool,
# i int32, I int64, T Time, M MicroTime, Q Quantity, X IntOrString, D Duration,
# a message name, [t] repeated, {t} map<string, t>, ^Message an embedded (inlined) struct.
_LAYOUTS = """
meta.TypeMeta apiVersion=1 kind=2
meta.Unknown typeMeta=1:meta.TypeMeta raw=2:b contentEncoding=3 contentType=4
meta.ObjectMeta name=1 generateName=2 namespace=3 selfLink=4 uid=5 resourceVersion=6
  generation=7:I creationTimestamp=8:T deletionTimestamp=9:T? deletionGracePeriodSeconds=10:I?
  labels=11:{s} annotations=12:{s} ownerReferences=13:[meta.OwnerReference] finalizers=14:[s]
  managedFields=17:[meta.ManagedFieldsEntry]
meta.OwnerReference kind=1 name=3 uid=4 apiVersion=5 controller=6:B? blockOwnerDeletion=7:B?
meta.ManagedFieldsEntry manager=1 operation=2 apiVersion=3 time=4:T? fieldsType=6
  fieldsV1=7:meta.FieldsV1? subresource=8
meta.FieldsV1 Raw=1:b
meta.LabelSelector matchLabels=1:{s} matchExpressions=2:[meta.LabelSelectorRequirement]
meta.LabelSelectorRequirement key=1 operator=2 values=3:[s]
meta.DeleteOptions gracePeriodSeconds=1:I? preconditions=2:meta.Preconditions?
  orphanDependents=3:B? propagationPolicy=4? dryRun=5:[s]
  ignoreStoreReadErrorWithClusterBreakingPotential=6:B?
meta.Preconditions uid=1? resourceVersion=2?
meta.Condition type=1 status=2 observedGeneration=3:I lastTransitionTime=4:T reason=5 message=6

core.Namespace metadata=1:meta.ObjectMeta spec=2:core.NamespaceSpec status=3:core.NamespaceStatus
core.NamespaceSpec finalizers=1:[s]
core.NamespaceStatus phase=1 conditions=2:[core.NamespaceCondition]
core.NamespaceCondition type=1 status=2 lastTransitionTime=4:T reason=5 message=6
core.ConfigMap metadata=1:meta.ObjectMeta data=2:{s} binaryData=3:{b} immutable=4:B?
core.Secret metadata=1:meta.ObjectMeta data=2:{b} type=3 stringData=4:{s} immutable=5:B?
core.ServiceAccount metadata=1:meta.ObjectMeta secrets=2:[core.ObjectReference]
  imagePullSecrets=3:[core.LocalObjectReference] automountServiceAccountToken=4:B?
core.ObjectReference kind=1 namespace=2 name=3 uid=4 apiVersion=5 resourceVersion=6 fieldPath=7
core.LocalObjectReference name=1
core.TypedLocalObjectReference apiGroup=1? kind=2 name=3
core.Binding metadata=1:meta.ObjectMeta target=2:core.ObjectReference
core.Service metadata=1:meta.ObjectMeta spec=2:core.ServiceSpec status=3:core.ServiceStatus
core.ServiceSpec ports=1:[core.ServicePort] selector=2:{s} clusterIP=3 type=4 externalIPs=5:[s]
  sessionAffinity=7 loadBalancerIP=8 loadBalancerSourceRanges=9:[s] externalName=10
  externalTrafficPolicy=11 healthCheckNodePort=12:i publishNotReadyAddresses=13:B
  sessionAffinityConfig=14:core.SessionAffinityConfig? ipFamilyPolicy=17? clusterIPs=18:[s]
  ipFamilies=19:[s] allocateLoadBalancerNodePorts=20:B? loadBalancerClass=21?
  internalTrafficPolicy=22? trafficDistribution=23?
core.ServicePort name=1 protocol=2 port=3:i targetPort=4:X nodePort=5:i appProtocol=6?
core.SessionAffinityConfig clientIP=1:core.ClientIPConfig?
core.ClientIPConfig timeoutSeconds=1:i?
core.ServiceStatus loadBalancer=1:core.LoadBalancerStatus conditions=2:[meta.Condition]
core.LoadBalancerStatus ingress=1:[core.LoadBalancerIngress]
core.LoadBalancerIngress ip=1 hostname=2 ipMode=3? ports=4:[core.PortStatus]
core.PortStatus port=1:i protocol=2 error=3?
core.ReplicationController metadata=1:meta.ObjectMeta spec=2:core.ReplicationControllerSpec
  status=3:core.ReplicationControllerStatus
core.ReplicationControllerSpec replicas=1:i? minReadySeconds=4:i selector=2:{s}
  template=3:core.PodTemplateSpec?
core.ReplicationControllerStatus replicas=1:i fullyLabeledReplicas=2:i readyReplicas=4:i
  availableReplicas=5:i observedGeneration=3:I

core.Pod metadata=1:meta.ObjectMeta spec=2:core.PodSpec status=3:core.PodStatus
core.PodStatus phase=1 message=3 reason=4 hostIP=5 podIP=6 startTime=7:T? qosClass=9
  nominatedNodeName=11 resize=14 observedGeneration=17:I
core.PodTemplateSpec metadata=1:meta.ObjectMeta spec=2:core.PodSpec
core.PodSpec volumes=1:[core.Volume] containers=2:[core.Container] restartPolicy=3
  terminationGracePeriodSeconds=4:I? activeDeadlineSeconds=5:I? dnsPolicy=6
  nodeSelector=7:{s} serviceAccountName=8 serviceAccount=9 nodeName=10 hostNetwork=11:B
  hostPID=12:B hostIPC=13:B securityContext=14:core.PodSecurityContext?
  imagePullSecrets=15:[core.LocalObjectReference] hostname=16 subdomain=17
  affinity=18:core.Affinity? schedulerName=19 initContainers=20:[core.Container]
  automountServiceAccountToken=21:B? tolerations=22:[core.Toleration]
  hostAliases=23:[core.HostAlias] priorityClassName=24 priority=25:i?
  dnsConfig=26:core.PodDNSConfig? shareProcessNamespace=27:B?
  readinessGates=28:[core.PodReadinessGate] runtimeClassName=29? enableServiceLinks=30:B?
  preemptionPolicy=31? overhead=32:{Q} topologySpreadConstraints=33:[core.TopologySpreadConstraint]
  ephemeralContainers=34:[core.EphemeralContainer] setHostnameAsFQDN=35:B? os=36:core.PodOS?
  hostUsers=37:B? schedulingGates=38:[core.PodSchedulingGate]
  resourceClaims=39:[core.PodResourceClaim] resources=40:core.ResourceRequirements?
  hostnameOverride=41?
core.Container name=1 image=2 command=3:[s] args=4:[s] workingDir=5 ports=6:[core.ContainerPort]
  env=7:[core.EnvVar] resources=8:core.ResourceRequirements volumeMounts=9:[core.VolumeMount]
  livenessProbe=10:core.Probe? readinessProbe=11:core.Probe? lifecycle=12:core.Lifecycle?
  terminationMessagePath=13 imagePullPolicy=14 securityContext=15:core.SecurityContext?
  stdin=16:B stdinOnce=17:B tty=18:B envFrom=19:[core.EnvFromSource]
  terminationMessagePolicy=20 volumeDevices=21:[core.VolumeDevice] startupProbe=22:core.Probe?
  resizePolicy=23:[core.ContainerResizePolicy] restartPolicy=24?
  restartPolicyRules=25:[core.ContainerRestartRule]
core.EphemeralContainer ephemeralContainerCommon=1:^core.Container targetContainerName=2
core.ContainerPort name=1 hostPort=2:i containerPort=3:i protocol=4 hostIP=5
core.EnvVar name=1 value=2 valueFrom=3:core.EnvVarSource?
core.EnvVarSource fieldRef=1:core.ObjectFieldSelector? resourceFieldRef=2:core.ResourceFieldSelector?
  configMapKeyRef=3:core.ConfigMapKeySelector? secretKeyRef=4:core.SecretKeySelector?
  fileKeyRef=5:core.FileKeySelector?
core.ObjectFieldSelector apiVersion=1 fieldPath=2
core.ResourceFieldSelector containerName=1 resource=2 divisor=3:Q
core.ConfigMapKeySelector localObjectReference=1:^core.LocalObjectReference key=2 optional=3:B?
core.SecretKeySelector localObjectReference=1:^core.LocalObjectReference key=2 optional=3:B?
core.FileKeySelector volumeName=1 path=2 key=3 optional=4:B?
core.EnvFromSource prefix=1 configMapRef=2:core.ConfigMapEnvSource? secretRef=3:core.SecretEnvSource?
core.ConfigMapEnvSource localObjectReference=1:^core.LocalObjectReference optional=2:B?
core.SecretEnvSource localObjectReference=1:^core.LocalObjectReference optional=2:B?
core.ResourceRequirements limits=1:{Q} requests=2:{Q} claims=3:[core.ResourceClaim]
core.ResourceClaim name=1 request=2
core.VolumeMount name=1 readOnly=2:B mountPath=3 subPath=4 mountPropagation=5? subPathExpr=6
  recursiveReadOnly=7?
core.VolumeDevice name=1 devicePath=2
core.ContainerResizePolicy resourceName=1 restartPolicy=2
core.ContainerRestartRule action=1 exitCodes=2:core.ContainerRestartRuleOnExitCodes?
core.ContainerRestartRuleOnExitCodes operator=1 values=2:[i]
core.Probe handler=1:^core.ProbeHandler initialDelaySeconds=2:i timeoutSeconds=3:i
  periodSeconds=4:i successThreshold=5:i failureThreshold=6:i terminationGracePeriodSeconds=7:I?
core.ProbeHandler exec=1:core.ExecAction? httpGet=2:core.HTTPGetAction?
  tcpSocket=3:core.TCPSocketAction? grpc=4:core.GRPCAction?
core.ExecAction command=1:[s]
core.HTTPGetAction path=1 port=2:X host=3 scheme=4 httpHeaders=5:[core.HTTPHeader]
core.HTTPHeader name=1 value=2
core.TCPSocketAction port=1:X host=2
core.GRPCAction port=1:i service=2?
core.Lifecycle postStart=1:core.LifecycleHandler? preStop=2:core.LifecycleHandler? stopSignal=3?
core.LifecycleHandler exec=1:core.ExecAction? httpGet=2:core.HTTPGetAction?
  tcpSocket=3:core.TCPSocketAction? sleep=4:core.SleepAction?
core.SleepAction seconds=1:I
core.SecurityContext capabilities=1:core.Capabilities? privileged=2:B?
  seLinuxOptions=3:core.SELinuxOptions? runAsUser=4:I? runAsNonRoot=5:B?
  readOnlyRootFilesystem=6:B? allowPrivilegeEscalation=7:B? runAsGroup=8:I? procMount=9?
  windowsOptions=10:core.WindowsSecurityContextOptions? seccompProfile=11:core.SeccompProfile?
  appArmorProfile=12:core.AppArmorProfile?
core.Capabilities add=1:[s] drop=2:[s]
core.SELinuxOptions user=1 role=2 type=3 level=4
core.SeccompProfile type=1 localhostProfile=2?
core.AppArmorProfile type=1 localhostProfile=2?
core.WindowsSecurityContextOptions gmsaCredentialSpecName=1? gmsaCredentialSpec=2?
  runAsUserName=3? hostProcess=4:B?
core.PodSecurityContext seLinuxOptions=1:core.SELinuxOptions? runAsUser=2:I? runAsNonRoot=3:B?
  supplementalGroups=4:[I] fsGroup=5:I? runAsGroup=6:I? sysctls=7:[core.Sysctl]
  windowsOptions=8:core.WindowsSecurityContextOptions? fsGroupChangePolicy=9?
  seccompProfile=10:core.SeccompProfile? appArmorProfile=11:core.AppArmorProfile?
  supplementalGroupsPolicy=12? seLinuxChangePolicy=13?
core.Sysctl name=1 value=2
core.Toleration key=1 operator=2 value=3 effect=4 tolerationSeconds=5:I?
core.HostAlias ip=1 hostnames=2:[s]
core.PodDNSConfig nameservers=1:[s] searches=2:[s] options=3:[core.PodDNSConfigOption]
core.PodDNSConfigOption name=1 value=2?
core.PodReadinessGate conditionType=1
core.PodOS name=1
core.PodSchedulingGate name=1
core.PodResourceClaim name=1 resourceClaimName=3? resourceClaimTemplateName=4?
core.TopologySpreadConstraint maxSkew=1:i topologyKey=2 whenUnsatisfiable=3
  labelSelector=4:meta.LabelSelector? minDomains=5:i? nodeAffinityPolicy=6? nodeTaintsPolicy=7?
  matchLabelKeys=8:[s]
core.Affinity nodeAffinity=1:core.NodeAffinity? podAffinity=2:core.PodAffinity?
  podAntiAffinity=3:core.PodAntiAffinity?
core.NodeAffinity requiredDuringSchedulingIgnoredDuringExecution=1:core.NodeSelector?
  preferredDuringSchedulingIgnoredDuringExecution=2:[core.PreferredSchedulingTerm]
core.NodeSelector nodeSelectorTerms=1:[core.NodeSelectorTerm]
core.NodeSelectorTerm matchExpressions=1:[core.NodeSelectorRequirement]
  matchFields=2:[core.NodeSelectorRequirement]
core.NodeSelectorRequirement key=1 operator=2 values=3:[s]
core.PreferredSchedulingTerm weight=1:i preference=2:core.NodeSelectorTerm
core.PodAffinity requiredDuringSchedulingIgnoredDuringExecution=1:[core.PodAffinityTerm]
  preferredDuringSchedulingIgnoredDuringExecution=2:[core.WeightedPodAffinityTerm]
core.PodAntiAffinity requiredDuringSchedulingIgnoredDuringExecution=1:[core.PodAffinityTerm]
  preferredDuringSchedulingIgnoredDuringExecution=2:[core.WeightedPodAffinityTerm]
core.PodAffinityTerm labelSelector=1:meta.LabelSelector? namespaces=2:[s] topologyKey=3
  namespaceSelector=4:meta.LabelSelector? matchLabelKeys=5:[s] mismatchLabelKeys=6:[s]
core.WeightedPodAffinityTerm weight=1:i podAffinityTerm=2:core.PodAffinityTerm
core.Volume name=1 volumeSource=2:^core.VolumeSource
core.VolumeSource hostPath=1:core.HostPathVolumeSource? emptyDir=2:core.EmptyDirVolumeSource?
  secret=6:core.SecretVolumeSource? nfs=7:core.NFSVolumeSource?
  persistentVolumeClaim=10:core.PersistentVolumeClaimVolumeSource?
  downwardAPI=16:core.DownwardAPIVolumeSource? configMap=19:core.ConfigMapVolumeSource?
  projected=26:core.ProjectedVolumeSource? csi=28:core.CSIVolumeSource?
  image=30:core.ImageVolumeSource?
core.HostPathVolumeSource path=1 type=2?
core.EmptyDirVolumeSource medium=1 sizeLimit=2:Q?
core.SecretVolumeSource secretName=1 items=2:[core.KeyToPath] defaultMode=3:i? optional=4:B?
core.NFSVolumeSource server=1 path=2 readOnly=3:B
core.PersistentVolumeClaimVolumeSource claimName=1 readOnly=2:B
core.DownwardAPIVolumeSource items=1:[core.DownwardAPIVolumeFile] defaultMode=2:i?
core.DownwardAPIVolumeFile path=1 fieldRef=2:core.ObjectFieldSelector?
  resourceFieldRef=3:core.ResourceFieldSelector? mode=4:i?
core.ConfigMapVolumeSource localObjectReference=1:^core.LocalObjectReference items=2:[core.KeyToPath]
  defaultMode=3:i? optional=4:B?
core.KeyToPath key=1 path=2 mode=3:i?
core.ProjectedVolumeSource sources=1:[core.VolumeProjection] defaultMode=2:i?
core.VolumeProjection secret=1:core.SecretProjection? downwardAPI=2:core.DownwardAPIProjection?
  configMap=3:core.ConfigMapProjection? serviceAccountToken=4:core.ServiceAccountTokenProjection?
core.SecretProjection localObjectReference=1:^core.LocalObjectReference items=2:[core.KeyToPath]
  optional=4:B?
core.ConfigMapProjection localObjectReference=1:^core.LocalObjectReference items=2:[core.KeyToPath]
  optional=4:B?
core.DownwardAPIProjection items=1:[core.DownwardAPIVolumeFile]
core.ServiceAccountTokenProjection audience=1 expirationSeconds=2:I? path=3
core.CSIVolumeSource driver=1 readOnly=2:B? fsType=3? volumeAttributes=4:{s}
  nodePublishSecretRef=5:core.LocalObjectReference?
core.ImageVolumeSource reference=1 pullPolicy=2

apps.Deployment metadata=1:meta.ObjectMeta spec=2:apps.DeploymentSpec status=3:apps.DeploymentStatus
apps.DeploymentSpec replicas=1:i? selector=2:meta.LabelSelector? template=3:core.PodTemplateSpec
  strategy=4:apps.DeploymentStrategy minReadySeconds=5:i revisionHistoryLimit=6:i? paused=7:B
  progressDeadlineSeconds=9:i?
apps.DeploymentStrategy type=1 rollingUpdate=2:apps.RollingUpdateDeployment?
apps.RollingUpdateDeployment maxUnavailable=1:X? maxSurge=2:X?
apps.DeploymentStatus observedGeneration=1:I replicas=2:i updatedReplicas=3:i
  availableReplicas=4:i unavailableReplicas=5:i conditions=6:[apps.DeploymentCondition]
  readyReplicas=7:i collisionCount=8:i? terminatingReplicas=9:i?
apps.DeploymentCondition type=1 status=2 reason=4 message=5 lastUpdateTime=6:T
  lastTransitionTime=7:T
apps.ReplicaSet metadata=1:meta.ObjectMeta spec=2:apps.ReplicaSetSpec status=3:apps.ReplicaSetStatus
apps.ReplicaSetSpec replicas=1:i? minReadySeconds=4:i selector=2:meta.LabelSelector?
  template=3:core.PodTemplateSpec
apps.ReplicaSetStatus replicas=1:i fullyLabeledReplicas=2:i readyReplicas=4:i
  availableReplicas=5:i terminatingReplicas=7:i? observedGeneration=3:I

batch.Job metadata=1:meta.ObjectMeta spec=2:batch.JobSpec status=3:batch.JobStatus
batch.JobSpec parallelism=1:i? completions=2:i? activeDeadlineSeconds=3:I?
  selector=4:meta.LabelSelector? manualSelector=5:B? template=6:core.PodTemplateSpec
  backoffLimit=7:i? ttlSecondsAfterFinished=8:i? completionMode=9? suspend=10:B?
  backoffLimitPerIndex=12:i? maxFailedIndexes=13:i? podReplacementPolicy=14? managedBy=15?
batch.JobStatus conditions=1:[batch.JobCondition] startTime=2:T? completionTime=3:T? active=4:i
  succeeded=5:i failed=6:i completedIndexes=7 uncountedTerminatedPods=8:batch.UncountedTerminatedPods?
  ready=9:i? failedIndexes=10? terminating=11:i?
batch.JobCondition type=1 status=2 lastProbeTime=3:T lastTransitionTime=4:T reason=5 message=6
batch.UncountedTerminatedPods succeeded=1:[s] failed=2:[s]
batch.CronJob metadata=1:meta.ObjectMeta spec=2:batch.CronJobSpec status=3:batch.CronJobStatus
batch.CronJobSpec schedule=1 startingDeadlineSeconds=2:I? concurrencyPolicy=3 suspend=4:B?
  jobTemplate=5:batch.JobTemplateSpec successfulJobsHistoryLimit=6:i?
  failedJobsHistoryLimit=7:i? timeZone=8?
batch.JobTemplateSpec metadata=1:meta.ObjectMeta spec=2:batch.JobSpec
batch.CronJobStatus active=1:[core.ObjectReference] lastScheduleTime=4:T?
  lastSuccessfulTime=5:T?

rbac.Role metadata=1:meta.ObjectMeta rules=2:[rbac.PolicyRule]
rbac.ClusterRole metadata=1:meta.ObjectMeta rules=2:[rbac.PolicyRule]
  aggregationRule=3:rbac.AggregationRule?
rbac.PolicyRule verbs=1:[s] apiGroups=2:[s] resources=3:[s] resourceNames=4:[s]
  nonResourceURLs=5:[s]
rbac.AggregationRule clusterRoleSelectors=1:[meta.LabelSelector]
rbac.RoleBinding metadata=1:meta.ObjectMeta subjects=2:[rbac.Subject] roleRef=3:rbac.RoleRef
rbac.ClusterRoleBinding metadata=1:meta.ObjectMeta subjects=2:[rbac.Subject] roleRef=3:rbac.RoleRef
rbac.Subject kind=1 apiGroup=2 name=3 namespace=4
rbac.RoleRef apiGroup=1 kind=2 name=3

authorization.SelfSubjectAccessReview metadata=1:meta.ObjectMeta
  spec=2:authorization.SelfSubjectAccessReviewSpec status=3:authorization.SubjectAccessReviewStatus
authorization.SelfSubjectAccessReviewSpec resourceAttributes=1:authorization.ResourceAttributes?
  nonResourceAttributes=2:authorization.NonResourceAttributes?
authorization.ResourceAttributes namespace=1 verb=2 group=3 version=4 resource=5 subresource=6
  name=7 fieldSelector=8:authorization.FieldSelectorAttributes?
  labelSelector=9:authorization.LabelSelectorAttributes?
authorization.FieldSelectorAttributes rawSelector=1 requirements=2:[meta.LabelSelectorRequirement]
authorization.LabelSelectorAttributes rawSelector=1 requirements=2:[meta.LabelSelectorRequirement]
authorization.NonResourceAttributes path=1 verb=2
authorization.SubjectAccessReviewStatus allowed=1:B denied=4:B reason=2 evaluationError=3
authorization.SelfSubjectRulesReview metadata=1:meta.ObjectMeta
  spec=2:authorization.SelfSubjectRulesReviewSpec status=3:authorization.SubjectRulesReviewStatus
authorization.SelfSubjectRulesReviewSpec namespace=1
authorization.SubjectRulesReviewStatus incomplete=3:B evaluationError=4
authentication.SelfSubjectReview metadata=1:meta.ObjectMeta status=2:authentication.SelfSubjectReviewStatus
authentication.SelfSubjectReviewStatus userInfo=1:authentication.UserInfo
authentication.UserInfo username=1 uid=2 groups=3:[s]

policy.Eviction metadata=1:meta.ObjectMeta deleteOptions=2:meta.DeleteOptions?
policy.PodDisruptionBudget metadata=1:meta.ObjectMeta spec=2:policy.PodDisruptionBudgetSpec
  status=3:policy.PodDisruptionBudgetStatus
policy.PodDisruptionBudgetSpec minAvailable=1:X? selector=2:meta.LabelSelector?
  maxUnavailable=3:X? unhealthyPodEvictionPolicy=4?
policy.PodDisruptionBudgetStatus observedGeneration=1:I disruptionsAllowed=3:i
  currentHealthy=4:i desiredHealthy=5:i expectedPods=6:i

coordination.Lease metadata=1:meta.ObjectMeta spec=2:coordination.LeaseSpec
coordination.LeaseSpec holderIdentity=1? leaseDurationSeconds=2:i? acquireTime=3:M?
  renewTime=4:M? leaseTransitions=5:i? strategy=6? preferredHolder=7?

autoscaling.Scale metadata=1:meta.ObjectMeta spec=2:autoscaling.ScaleSpec status=3:autoscaling.ScaleStatus
autoscaling.ScaleSpec replicas=1:i
autoscaling.ScaleStatus replicas=1:i selector=2
"""

# (apiVersion, kind) -> message
_KINDS = {
    ("v1", "Namespace"): "core.Namespace",
    ("v1", "ConfigMap"): "core.ConfigMap",
    ("v1", "Secret"): "core.Secret",
    ("v1", "ServiceAccount"): "core.ServiceAccount",
    ("v1", "Service"): "core.Service",
    ("v1", "Pod"): "core.Pod",
    ("v1", "Binding"): "core.Binding",
    ("v1", "ReplicationController"): "core.ReplicationController",
    ("apps/v1", "Deployment"): "apps.Deployment",
    ("apps/v1", "ReplicaSet"): "apps.ReplicaSet",
    ("batch/v1", "Job"): "batch.Job",
    ("batch/v1", "CronJob"): "batch.CronJob",
    ("rbac.authorization.k8s.io/v1", "Role"): "rbac.Role",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "rbac.ClusterRole",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rbac.RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "rbac.ClusterRoleBinding",
    (
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
    ): "authorization.SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "authorization.SelfSubjectRulesReview",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "authentication.SelfSubjectReview",
    ("policy/v1", "Eviction"): "policy.Eviction",
    ("policy/v1", "PodDisruptionBudget"): "policy.PodDisruptionBudget",
    ("coordination.k8s.io/v1", "Lease"): "coordination.Lease",
    ("autoscaling/v1", "Scale"): "autoscaling.Scale",
    ("v1", "DeleteOptions"): "meta.DeleteOptions",
    ("meta.k8s.io/v1", "DeleteOptions"): "meta.DeleteOptions",
}


@dataclass(frozen=True)
class _Field:
    name: str
    type: str  # a scalar code or a message name
    repeated: bool = False
    map: bool = False
    pointer: bool = False
    inline: bool = False


def _parse_layouts(text: str) -> dict[str, dict[int, _Field]]:
    messages: dict[str, dict[int, _Field]] = {}
    current: dict[int, _Field] | None = None
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if not line.startswith(" "):
            current = messages[words[0]] = {}
            words = words[1:]
        assert current is not None
        for word in words:
            name, _, rest = word.partition("=")
            number, _, kind = rest.partition(":")
            pointer = kind.endswith("?") or number.endswith("?")
            number, kind = number.rstrip("?"), (kind.rstrip("?") or "s")
            repeated = kind.startswith("[")
            is_map = kind.startswith("{")
            inline = kind.startswith("^")
            kind = kind.strip("[]{}^")
            current[int(number)] = _Field(name, kind, repeated, is_map, pointer, inline)
    for fields in messages.values():
        for f in fields.values():
            if "." in f.type and f.type not in messages:
                raise ValueError(f"protobuf layout: unknown message {f.type}")
    return messages


MESSAGES = _parse_layouts(_LAYOUTS)


def decode_object(data: bytes) -> dict[str, Any]:
    """A protobuf request body -> the object as JSON would have carried it (400 if unreadable)."""
    if not data.startswith(MAGIC):
        raise errors.bad_request("the protobuf body does not start with the Kubernetes magic")
    try:
        unknown = _message(data[len(MAGIC) :], "meta.Unknown")
        type_meta = unknown.get("typeMeta") or {}
        api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
        message = _KINDS.get((api_version, kind))
        if message is None:
            raise _Unreadable(f"no protobuf decoding for {api_version}, Kind={kind}")
        raw = base64.b64decode(unknown.get("raw") or "")
        obj = _message(raw, message)
    except _Unreadable as e:
        raise errors.bad_request(f"unable to decode the protobuf body: {e}") from None
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise errors.bad_request(f"malformed protobuf body: {e}") from None
    return {"kind": kind, "apiVersion": api_version, **obj}


def encode_known(api_version: str, kind: str) -> bool:
    """Whether a body of this kind can be decoded here."""
    return (api_version, kind) in _KINDS


class _Unreadable(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Unreadable("varint too long")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(number, wire type, raw value) of each field, in order."""
    out: list[tuple[int, int, Any]] = []
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise _Unreadable("a field runs past the end of its message")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise _Unreadable(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _message(data: bytes, name: str) -> dict[str, Any]:
    layout = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, wire, raw in _fields(data):
        f = layout.get(number)
        if f is None:
            raise _Unreadable(f"field {number} of {name} is not known to this server")
        if f.map:
            entry = {n: v for n, _, v in _fields(raw)}
            key = entry.get(1, b"").decode()
            out.setdefault(f.name, {})[key] = _value(entry.get(2, b""), 2, f.type, name)
            continue
        if f.repeated:
            items = out.setdefault(f.name, [])
            if wire == 2 and f.type in _VARINT_TYPES:  # packed scalars
                pos = 0
                while pos < len(raw):
                    v, pos = _varint(raw, pos)
                    items.append(_scalar_int(v, f.type))
            else:
                items.append(_value(raw, wire, f.type, name))
            continue
        value = _value(raw, wire, f.type, name)
        if f.inline:
            out.update(value)
        elif f.pointer or not _is_zero(value):
            out[f.name] = value
    return out


_VARINT_TYPES = frozenset("iIB")


def _scalar_int(value: int, kind: str) -> Any:
    if kind == "B":
        return bool(value)
    signed = _signed(value)
    return ((signed + (1 << 31)) % (1 << 32)) - (1 << 31) if kind == "i" else signed


def _value(raw: Any, wire: int, kind: str, where: str) -> Any:
    if kind in _VARINT_TYPES:
        if wire != 0:
            raise _Unreadable(f"{where}: expected a varint")
        return _scalar_int(raw, kind)
    if wire != 2:
        raise _Unreadable(f"{where}: expected length-delimited data")
    if kind == "s":
        return raw.decode()
    if kind == "b":
        return base64.b64encode(raw).decode()
    if kind == "Q":
        return _message(raw, "_Quantity").get("string", "")
    if kind == "X":
        v = {n: x for n, _, x in _fields(raw)}
        if v.get(1, 0) == 1:
            return v.get(3, b"").decode()
        return _signed(v.get(2, 0))
    if kind in ("T", "M"):
        v = {n: x for n, _, x in _fields(raw)}
        seconds, nanos = _signed(v.get(1, 0)), v.get(2, 0)
        if not seconds and not nanos:
            return None
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        return f"{stamp}.{nanos // 1000:06d}Z" if kind == "M" else f"{stamp}Z"
    if kind == "D":
        nanos = _signed({n: x for n, _, x in _fields(raw)}.get(1, 0))
        return f"{nanos / 1e9:g}s"
    if kind == "meta.FieldsV1":
        import json

        return json.loads({n: x for n, _, x in _fields(raw)}.get(1, b"{}"))
    return _message(raw, kind)


MESSAGES["_Quantity"] = {1: _Field("string", "s")}


def _is_zero(value: Any) -> bool:
    return value is None or value == "" or value == 0 or value == {} or value == []
