{{/* What the operator does inside a namespace it manages. */}}
{{- define "xmq.namespacedRules" -}}
# The custom resource: watched, its status written, kopf's progress annotations patched.
- apiGroups: [xmq.io]
  resources: [xmqclusters]
  verbs: [get, list, watch, patch]
- apiGroups: [xmq.io]
  resources: [xmqclusters/status]
  verbs: [get, patch]
# Children, written with server-side apply and watched for drift (a deleted or edited child
# is restored); old config revisions (ConfigMaps) are deleted after a roll.
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# Broker pods: watched for dead-pod cleanup and status; evicted one at a time (Eviction API,
# respecting the PDB) by rolls and scale-in, never deleted directly.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
# Redis/PostgreSQL/TLS Secrets named by an XmqCluster (read by name only).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# Events: posted on XmqClusters; the StatefulSet's FailedCreate Events are read (admission
# refusals become Degraded PodCreationRefused).
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, list]
{{- end -}}

{{/* What is cluster-scoped: read-only. */}}
{{- define "xmq.clusterRules" -}}
# Nodes: deletion and the out-of-service taint mark their pods dead.
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
# kopf discovers custom resources as they appear, and the namespaces it watches (without
# namespaces it would retry 403s for a minute before watching anything).
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end -}}
