{{/* Name of the chart (overridable). */}}
{{- define "xmq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's operator objects. */}}
{{- define "xmq.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-operator" (include "xmq.releaseName" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "xmq.releaseName" -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "xmq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels of every object of the release, without a component. */}}
{{- define "xmq.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "xmq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: xmq
{{- end -}}

{{/* Labels of the operator's objects. */}}
{{- define "xmq.labels" -}}
{{ include "xmq.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "xmq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "xmq.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "xmq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Name of the release's cluster-scoped objects (ClusterRole, ClusterRoleBinding): unique per
release, since two releases in two namespaces may share a release name. */}}
{{- define "xmq.clusterScopedName" -}}
{{- printf "%s-%s" .Release.Namespace (include "xmq.fullname" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Pod and container security contexts meeting Pod Security "restricted". */}}
{{- define "xmq.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "xmq.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The oldest Kubernetes the chart supports is told by the APIs the target serves, not by
.Capabilities.KubeVersion: `helm template` without --kube-version renders against helm's
compiled-in default version, which for a helm built without the release ldflags is v1.20.
flowcontrol.apiserver.k8s.io/v1 is served from 1.29, where the CRD's CEL rules are GA. */}}
{{- define "xmq.checkKubernetes" -}}
{{- if not (.Capabilities.APIVersions.Has "flowcontrol.apiserver.k8s.io/v1") -}}
{{- fail "the xmq chart needs Kubernetes >= 1.29 (the XmqCluster CRD's CEL validation rules)" -}}
{{- end -}}
{{- end -}}
