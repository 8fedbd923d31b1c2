{{- define "tandem.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tandem.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one role: gateway, prefill or decode. */}}
{{- define "tandem.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "tandem.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The headless Service of a worker role, and the gateway's target for it. */}}
{{- define "tandem.headless" -}}
{{- printf "%s-%s-headless" (include "tandem.fullname" .root) .role -}}
{{- end -}}
{{- define "tandem.target" -}}
{{- printf "dns:///%s.%s.svc.%s:%v" (include "tandem.headless" .) .root.Release.Namespace .root.Values.clusterDomain .root.Values.ports.grpc -}}
{{- end -}}

{{- define "tandem.modelPath" -}}
{{- printf "/models/%s" .Values.model.file -}}
{{- end -}}

{{- define "tandem.modelVolume" -}}
- name: model
{{- if eq .Values.model.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ required "model.pvc.claimName is required with model.source=pvc" .Values.model.pvc.claimName }}
    readOnly: {{ .Values.model.pvc.readOnly }}
{{- else if eq .Values.model.source "hostPath" }}
  hostPath:
    path: {{ required "model.hostPath.path is required with model.source=hostPath" .Values.model.hostPath.path }}
    type: Directory
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{/* The init container that fills the model volume, when one does. */}}
{{- define "tandem.modelInit" -}}
{{- if eq .Values.model.source "synthetic" }}
- name: make-model
  image: {{ include "tandem.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["tandem", "make-model", "--out", {{ include "tandem.modelPath" . | quote }}]
  args: {{ toJson .Values.model.synthetic.args }}
  volumeMounts:
    - {name: model, mountPath: /models}
{{- else if eq .Values.model.source "initContainer" }}
- name: fetch-model
  image: {{ .Values.model.initContainer.image }}
  command: ["sh", "-c", "test -s \"$0\" || curl -fsSL --retry 5 -o \"$0.part\" \"$1\" && mv \"$0.part\" \"$0\"", {{ include "tandem.modelPath" . | quote }}, {{ required "model.initContainer.url is required with model.source=initContainer" .Values.model.initContainer.url | quote }}]
  volumeMounts:
    - {name: model, mountPath: /models}
{{- end }}
{{- end -}}

{{/* Flags and mounts every process shares: TLS between the parts. */}}
{{- define "tandem.internalTlsArgs" -}}
{{- if .Values.tls.internal.enabled }}
- --mtls-cert=/etc/tandem/internal-tls/tls.crt
- --mtls-key=/etc/tandem/internal-tls/tls.key
- --mtls-ca=/etc/tandem/internal-tls/ca.crt
- --mtls-server-name={{ .Values.tls.internal.serverName }}
{{- end }}
- --tls-reload-s={{ .Values.tls.reloadSeconds }}
{{- end -}}

{{- define "tandem.internalTlsVolume" -}}
{{- if .Values.tls.internal.enabled }}
- name: internal-tls
  secret:
    secretName: {{ required "tls.internal.secretName is required with tls.internal.enabled" .Values.tls.internal.secretName }}
{{- end }}
{{- end -}}

{{- define "tandem.internalTlsMount" -}}
{{- if .Values.tls.internal.enabled }}
- {name: internal-tls, mountPath: /etc/tandem/internal-tls, readOnly: true}
{{- end }}
{{- end -}}

{{/* Kubernetes-native gRPC probes on the plaintext health port. */}}
{{- define "tandem.probes" -}}
startupProbe:
  grpc: {port: {{ .Values.ports.health }}}
  periodSeconds: 2
  failureThreshold: 150
readinessProbe:
  grpc: {port: {{ .Values.ports.health }}}
  periodSeconds: 5
  failureThreshold: 2
# Liveness asks for "liveness", SERVING while the process runs: a gateway
# whose workers are away is not ready, but alive.
livenessProbe:
  grpc: {port: {{ .Values.ports.health }}, service: liveness}
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}
