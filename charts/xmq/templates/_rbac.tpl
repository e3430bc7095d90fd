{{/* What the operator does inside a namespace it manages. */}}
{{- define "xmq.namespacedRules" -}}
# The custom resource: watched, its status written, kopf's progress annotations patched.
- apiGroups: [xmq.io]
  resources: [xmqclusters]
  verbs: [get, list, watch, patch]
- apiGroups: [xmq.io]
  resources: [xmqclusters/status]
  verbs: [get, patch]
# Children, written with server-side apply (and watched, so drift is repaired).
- apiGroups: [""]
  resources: [configmaps, services]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, delete]
# Broker pods: watched for dead-pod cleanup, replaced one at a time by the roll (evicted,
# so the PodDisruptionBudget is respected, or deleted when stuck).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [pods/eviction]
  verbs: [create]
# Redis/PostgreSQL/TLS Secrets named by an XmqCluster (read by name only).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
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
