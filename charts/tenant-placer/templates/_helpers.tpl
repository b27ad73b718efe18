{{/*
The chart name, or nameOverride.
*/}}
{{- define "tenant-placer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fully qualified name: fullnameOverride, else <release>-<name>, or just the release name when it
already contains the chart name (release "tenant-placer" gives "tenant-placer"). At most 63
characters, the DNS label limit.
*/}}
{{- define "tenant-placer.fullname" -}}
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

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "tenant-placer.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "tenant-placer.labels" -}}
helm.sh/chart: {{ include "tenant-placer.chart" . }}
{{ include "tenant-placer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the controller Pods (immutable once a Deployment exists).
*/}}
{{- define "tenant-placer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenant-placer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the controller runs as.
*/}}
{{- define "tenant-placer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tenant-placer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The user name the API server gives the controller's ServiceAccount in admission requests
(request.userInfo.username): system:serviceaccount:<release namespace>:<ServiceAccount name>.
*/}}
{{- define "tenant-placer.controllerUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "tenant-placer.serviceAccountName" .) }}
{{- end }}

{{/*
The controller image: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "tenant-placer.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
"true" when leader election is on: leaderElection.enabled when it is a boolean, else (null or
unset) automatic, on iff replicaCount > 1. Test with `eq (include ...) "true"`.
*/}}
{{- define "tenant-placer.leaderElection" -}}
{{- $enabled := (.Values.leaderElection | default dict).enabled }}
{{- if kindIs "bool" $enabled }}
{{- $enabled }}
{{- else }}
{{- gt (int .Values.replicaCount) 1 }}
{{- end }}
{{- end }}

{{/*
The leader Lease name: leaderElection.leaseName, else the fullname.
*/}}
{{- define "tenant-placer.leaseName" -}}
{{- (.Values.leaderElection | default dict).leaseName | default (include "tenant-placer.fullname" .) }}
{{- end }}
