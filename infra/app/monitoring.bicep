// Log Analytics workspace + workspace-based Application Insights with local (instrumentation
// key) authentication disabled: telemetry is only accepted with an Entra ID token, which the
// Function App gets from its managed identity (Monitoring Metrics Publisher, see rbac.bicep).

@description('Name of the Log Analytics workspace.')
param logAnalyticsName string

@description('Name of the Application Insights component.')
param appInsightsName string

@description('Azure region of the monitoring resources.')
param location string

@description('Tags applied to the monitoring resources.')
param tags object

@minValue(30)
@maxValue(730)
@description('Days Log Analytics keeps data.')
param retentionInDays int

resource logs 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logs.id
    // Keyless: reject telemetry sent with only the instrumentation key.
    DisableLocalAuth: true
  }
}

output appInsightsName string = appInsights.name
output logAnalyticsName string = logs.name
