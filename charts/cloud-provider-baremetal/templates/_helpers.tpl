{{/*
Labels of every object: the base's app.kubernetes.io/part-of, and Helm's own.
*/}}
{{- define "baremetal.labels" -}}
app.kubernetes.io/part-of: cloud-provider-baremetal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
The image of a program: repository:tag, and @digest when one is given. Called with a dict of
the program's image values ("image") and the root context ("root").
*/}}
{{- define "baremetal.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- if .image.digest -}}
{{- printf "%s:%s@%s" .image.repository $tag .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end }}

{{/*
The name of the cloud-config ConfigMap both programs mount.
*/}}
{{- define "baremetal.cloudConfigName" -}}
{{- .Values.cloudConfig.existingConfigMap | default "cloud-config" -}}
{{- end }}

{{/*
The volumes of both programs: the cloud-config and the probe key.
*/}}
{{- define "baremetal.volumes" -}}
- name: cloud-config
  configMap:
    name: {{ include "baremetal.cloudConfigName" . }}
# The key that authenticates the health probes between the ccm and the agents, and the
# ccm's public key (verdict.pub), which checks its verdicts and duty lists.
- name: probe-key
  secret:
    secretName: {{ required "probeKey.secretName is required" .Values.probeKey.secretName }}
    defaultMode: 0400
{{- end }}

{{/*
The volume mounts of both programs, where their arguments read the files.
*/}}
{{- define "baremetal.volumeMounts" -}}
- name: cloud-config
  mountPath: /etc/baremetal
  readOnly: true
- name: probe-key
  mountPath: /etc/baremetal-probe-key
  readOnly: true
{{- end }}

{{/*
The UDP port the agents answer probes on: failover.agentPort of the inline cloud-config,
or its default, 7474, with a ConfigMap of your own (the chart cannot read it).
*/}}
{{- define "baremetal.agentPort" -}}
{{- $port := 7474 -}}
{{- if not .Values.cloudConfig.existingConfigMap -}}
{{- with (.Values.cloudConfig.config.failover | default dict).agentPort -}}
{{- $port = . -}}
{{- end -}}
{{- end -}}
{{- int $port -}}
{{- end }}
