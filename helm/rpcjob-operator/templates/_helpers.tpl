{{/* Names: <release>-<chart>, shortened to 63 characters, unless overridden. */}}
{{- define "rpcjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rpcjob-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rpcjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rpcjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rpcjob-operator.leaderElectionNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{/*
The standard labels every object carries (tests/helm checks them on every
rendered object). Call with (dict "ctx" $ "component" "operator").
*/}}
{{- define "rpcjob-operator.labels" -}}
{{- $ctx := .ctx }}
helm.sh/chart: {{ printf "%s-%s" $ctx.Chart.Name $ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "rpcjob-operator.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: rpcjob
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
{{- end }}

{{/* The operator pods' selector: stable across upgrades (no version). */}}
{{- define "rpcjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rpcjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "rpcjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* A DNS-1123 name from a file name: dashboards/rpcjob_Transfers.json -> rpcjob-transfers */}}
{{- define "rpcjob-operator.fileSlug" -}}
{{- $stem := base . | trimSuffix (ext .) | lower }}
{{- regexReplaceAll "[^a-z0-9-]+" $stem "-" | trimAll "-" }}
{{- end }}

{{/*
The restricted pod security settings (Pod Security Standards "restricted"),
fixed rather than configurable; tests/helm checks them.
*/}}
{{- define "rpcjob-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "rpcjob-operator.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}
